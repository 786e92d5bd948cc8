package main

import (
	"reflect"

	"einsora.dev/edge/hub/trust"
)

// plain strips, in place, every rune that is not printable from the
// strings of what v points to, before it is printed as text: what machines
// report, and what was stored before the admin API refused control
// characters, must not reach the operator's terminal as escape sequences.
// (--json output needs none: JSON escapes them.)
func plain(v any) {
	plainValue(reflect.ValueOf(v))
}

func plainValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			plainValue(v.Elem())
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(trust.Text(v.String(), len(v.String())))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				plainValue(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			plainValue(v.Index(i))
		}
	}
}
