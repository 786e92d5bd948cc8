package httpapi

import (
	"fmt"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"

	"einsora.dev/edge/hub"
)

// checkPrintable refuses a decoded admin body any of whose strings holds a
// rune that is not printable (unicode.IsPrint: control and format
// characters such as ESC, NUL, U+0085 and U+202E) or invalid UTF-8, naming
// the field: what the admin API stores is later printed on operators'
// terminals. It walks every string of v, so a new field is covered
// without a new line here.
func checkPrintable(v any) error {
	return walkStrings(reflect.ValueOf(v), "", func(field, s string) error {
		for i, r := range s {
			if r == utf8.RuneError || !unicode.IsPrint(r) {
				return fmt.Errorf("%w: field %q holds a character that is not printable (%U at byte %d); use plain text", hub.ErrInvalid, field, r, i)
			}
		}
		return nil
	})
}

func walkStrings(v reflect.Value, field string, fn func(field, s string) error) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return walkStrings(v.Elem(), field, fn)
	case reflect.String:
		return fn(field, v.String())
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			if err := walkStrings(v.Field(i), name, fn); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if err := walkStrings(v.Index(i), field, fn); err != nil {
				return err
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if err := walkStrings(it.Key(), field, fn); err != nil {
				return err
			}
			if err := walkStrings(it.Value(), field, fn); err != nil {
				return err
			}
		}
	}
	return nil
}
