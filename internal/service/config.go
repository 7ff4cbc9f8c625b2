package service

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caarlos0/env/v11"
)

// LookupEnv is how a process reads one environment variable: os.LookupEnv,
// or a map in tests. It tells an unset variable from an empty one (an empty
// ALLOWED_SOURCES allows any source; an unset one takes the default).
type LookupEnv func(key string) (string, bool)

// MapEnv is a LookupEnv over a map, for tests.
func MapEnv(m map[string]string) LookupEnv {
	return func(key string) (string, bool) {
		v, ok := m[key]
		return v, ok
	}
}

// Config reads spec, a pointer to a struct whose fields carry `env` tags
// (with `envDefault`, and `desc` for Usage), from lookup. Its errors name the
// variable in one line and never quote a value: a value may be a secret.
func Config(lookup LookupEnv, spec any) error {
	vars, err := fields(spec)
	if err != nil {
		return err
	}
	environment := map[string]string{}
	var empty []string // fields set to "" that have a default
	for _, v := range vars {
		if value, ok := lookup(v.key); ok {
			environment[v.key] = value
			if value == "" && v.def != "" {
				empty = append(empty, v.field)
			}
		}
	}
	err = env.ParseWithOptions(spec, env.Options{Environment: environment})
	if err == nil {
		// env takes a variable set to "" for an unset one, and gives it
		// its default; set to "", it is empty (an empty ALLOWED_SOURCES
		// allows any source).
		for _, name := range empty {
			f := reflect.ValueOf(spec).Elem().FieldByName(name)
			f.Set(reflect.Zero(f.Type()))
		}
		return nil
	}
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err
	}
	keyOf := map[string]string{}
	for _, v := range vars {
		keyOf[v.field] = v.key
	}
	var msgs []string
	for _, e := range agg.Errors {
		var (
			parseErr env.ParseError
			notSet   env.VarIsNotSetError
			emptyErr env.EmptyVarError
		)
		switch {
		case errors.As(e, &parseErr):
			msgs = append(msgs, fmt.Sprintf("%s: not a valid %s", keyOf[parseErr.Name], typeName(parseErr.Type)))
		case errors.As(e, &notSet):
			msgs = append(msgs, notSet.Key+" is required")
		case errors.As(e, &emptyErr):
			msgs = append(msgs, emptyErr.Key+" must not be empty")
		default:
			msgs = append(msgs, e.Error())
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}

// Usage prints header and the table of the environment variables of spec
// (KEY TYPE DEFAULT REQUIRED DESCRIPTION).
func Usage(w io.Writer, header string, spec any) error {
	vars, err := fields(spec)
	if err != nil {
		return err
	}
	fmt.Fprint(w, header)
	tw := tabwriter.NewWriter(w, 1, 0, 4, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTYPE\tDEFAULT\tREQUIRED\tDESCRIPTION")
	for _, v := range vars {
		required := ""
		if v.required {
			required = "true"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.key, typeName(v.typ), v.def, required, v.desc)
	}
	return tw.Flush()
}

// variable is one field of a configuration struct.
type variable struct {
	field, key, def, desc string
	required              bool
	typ                   reflect.Type
}

// fields lists the variables of spec, those of embedded structs included,
// in declaration order.
func fields(spec any) ([]variable, error) {
	t := reflect.TypeOf(spec)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, errors.New("config: the spec must be a pointer to a struct")
	}
	var vars []variable
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			tag, ok := f.Tag.Lookup("env")
			if !ok {
				continue
			}
			key, opts, _ := strings.Cut(tag, ",")
			vars = append(vars, variable{
				field: f.Name, key: key, def: f.Tag.Get("envDefault"), desc: f.Tag.Get("desc"),
				required: strings.Contains(opts, "required"), typ: f.Type,
			})
		}
	}
	walk(t.Elem())
	return vars, nil
}

// typeName is how the usage table names a variable's type.
func typeName(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "Duration"
	case t.Kind() == reflect.Bool:
		return "True or False"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "Integer"
	case t.Kind() == reflect.Slice:
		return "Comma-separated list of " + typeName(t.Elem())
	default:
		return "String"
	}
}
