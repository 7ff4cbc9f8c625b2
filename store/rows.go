package store

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// A row type lists the columns a statement writes, one field per column:
// its `db` tag names the column and its `pg` tag the PostgreSQL type of the
// column. The statement takes any number of rows at once, one array per
// column, unnested (unnestRows); one row and many go the same way, and a
// column added to the type is in every statement that writes the type, with
// its value checked by the compiler wherever a row is made.

// rowColumn is one column of a row type.
type rowColumn struct {
	name, pgType string
	field        int
}

var rowColumns sync.Map // reflect.Type → []rowColumn

// columnsOf returns the columns of the row type R, in field order.
func columnsOf[R any]() []rowColumn {
	t := reflect.TypeFor[R]()
	if cols, ok := rowColumns.Load(t); ok {
		return cols.([]rowColumn)
	}
	var cols []rowColumn
	for i := range t.NumField() {
		f := t.Field(i)
		name, pgType := f.Tag.Get("db"), f.Tag.Get("pg")
		if name == "" || pgType == "" {
			panic(fmt.Sprintf("store: row type %s: field %s needs db and pg tags", t, f.Name))
		}
		cols = append(cols, rowColumn{name: name, pgType: pgType, field: i})
	}
	rowColumns.Store(t, cols)
	return cols
}

// columnList is "a, b, c": the columns of R, each prefixed with prefix
// (such as "r.").
func columnList[R any](prefix string) string {
	cols := columnsOf[R]()
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = prefix + c.name
	}
	return strings.Join(names, ", ")
}

// unnestRows is "unnest(@a::t[], ...) AS alias(a, ...)": the rows of R as a
// relation, from the named arguments that rowArgs sets.
func unnestRows[R any](alias string) string {
	cols := columnsOf[R]()
	params := make([]string, len(cols))
	for i, c := range cols {
		params[i] = "@" + c.name + "::" + c.pgType + "[]"
	}
	return "unnest(" + strings.Join(params, ", ") + ") AS " + alias + "(" + columnList[R]("") + ")"
}

// rowArgs sets in args, for each column of R, the array of its values in
// rows.
func rowArgs[R any](rows []R, args pgx.NamedArgs) pgx.NamedArgs {
	if args == nil {
		args = pgx.NamedArgs{}
	}
	t := reflect.TypeFor[R]()
	for _, c := range columnsOf[R]() {
		values := reflect.MakeSlice(reflect.SliceOf(t.Field(c.field).Type), len(rows), len(rows))
		for i := range rows {
			values.Index(i).Set(reflect.ValueOf(&rows[i]).Elem().Field(c.field))
		}
		args[c.name] = values.Interface()
	}
	return args
}
