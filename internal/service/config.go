package service

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"text/tabwriter"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// Config reads spec, a pointer to a struct whose fields carry envconfig
// tags (`envconfig:"NAME"`, with `default`, `required:"true"` and `desc` for
// Usage), from the process's environment with envconfig.
//
// A variable set to the empty string is empty, not unset: it does not take
// its default (an empty ALLOWED_SOURCES allows any source), and an empty
// required variable is as missing as an unset one. Errors name the variable
// in one line and never quote a value: a value may be a secret (a token
// pasted where a hash belongs, a password in a URL), and envconfig's own
// ParseError quotes it.
func Config(spec any) error {
	vars, err := fields(spec)
	if err != nil {
		return err
	}
	byKey := map[string]variable{}
	for _, v := range vars {
		byKey[v.key] = v
		if !v.required {
			continue
		}
		switch value, ok := os.LookupEnv(v.key); {
		case !ok:
			return fmt.Errorf("%s is required", v.key)
		case value == "":
			return fmt.Errorf("%s is required, and is set but empty", v.key)
		}
	}
	err = envconfig.Process("", spec)
	var parseErr *envconfig.ParseError
	if errors.As(err, &parseErr) {
		v := byKey[parseErr.KeyName]
		if parseErr.Value == "" && v.def != "" {
			return fmt.Errorf("%s is set but empty, which is not a valid %s (unset, it takes its default, %s)", v.key, typeName(v.typ), v.def)
		}
		if parseErr.Value == "" {
			return fmt.Errorf("%s is set but empty, which is not a valid %s", v.key, typeName(v.typ))
		}
		// Neither parseErr.Value nor parseErr.Err (strconv's and time's
		// errors quote the input) is shown.
		return fmt.Errorf("%s: not a valid %s", v.key, typeName(v.typ))
	}
	// envconfig's other errors (a spec that is not a struct pointer, a
	// required variable unset, checked above) hold no value.
	return err
}

// usageTable is the table of Usage: envconfig's DefaultTableFormat without
// its preamble (each binary has its own header).
const usageTable = "KEY\tTYPE\tDEFAULT\tREQUIRED\tDESCRIPTION\n" +
	"{{range .}}{{usage_key .}}\t{{usage_type .}}\t{{usage_default .}}\t{{usage_required .}}\t{{usage_description .}}\n{{end}}"

// Usage prints header and envconfig's table of the environment variables of
// spec (KEY TYPE DEFAULT REQUIRED DESCRIPTION), in columns.
func Usage(w io.Writer, header string, spec any) error {
	if _, err := fields(spec); err != nil {
		return err
	}
	fmt.Fprint(w, header)
	tw := tabwriter.NewWriter(w, 1, 0, 4, ' ', 0)
	if err := envconfig.Usagef("", spec, tw, usageTable); err != nil {
		return err
	}
	return tw.Flush()
}

// variable is one field of a configuration struct.
type variable struct {
	key, def string
	required bool
	typ      reflect.Type
}

// fields lists the variables of spec, those of embedded structs included,
// in declaration order, as envconfig sees them. A field that envconfig
// would read under a name of its own making (an exported field without an
// envconfig tag: FIELDNAME) is an error of the spec.
func fields(spec any) ([]variable, error) {
	t := reflect.TypeOf(spec)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, envconfig.ErrInvalidSpecification
	}
	var vars []variable
	var walk func(t reflect.Type) error
	walk = func(t reflect.Type) error {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || f.Tag.Get("ignored") == "true" {
				continue
			}
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				if err := walk(f.Type); err != nil {
					return err
				}
				continue
			}
			key := f.Tag.Get("envconfig")
			if key == "" {
				return fmt.Errorf("config: field %s has no envconfig tag", f.Name)
			}
			vars = append(vars, variable{
				key: key, def: f.Tag.Get("default"), required: f.Tag.Get("required") == "true", typ: f.Type,
			})
		}
		return nil
	}
	if err := walk(t.Elem()); err != nil {
		return nil, err
	}
	return vars, nil
}

// typeName is how an error names a variable's type, as envconfig's usage
// table does.
func typeName(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "Duration"
	case t.Kind() == reflect.Bool:
		return "True or False"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "Integer"
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		return "Unsigned Integer"
	case t.Kind() == reflect.Slice:
		return "Comma-separated list of " + typeName(t.Elem())
	default:
		return "String"
	}
}
