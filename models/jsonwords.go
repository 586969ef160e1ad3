package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// JSONWords says why a JSON document could not be decoded in the
// document's own terms: where (the byte, the field) and what JSON was
// expected, never the Go type it was decoded into ("must be an array",
// not "must be []models.ManifestResource").
func JSONWords(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		where := "the document"
		if te.Field != "" {
			where = "field " + te.Field
		}
		return fmt.Sprintf("%s must be %s, not %s (at byte %d)", where, jsonKind(te.Type), jsonValue(te.Value), te.Offset)
	case errors.Is(err, io.EOF):
		return "empty body; a JSON object is expected"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the JSON ends before its value does"
	}
	return err.Error()
}

// jsonKind names what a Go type decodes from, as JSON calls it.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another value"
}

// jsonValue says what UnmarshalTypeError.Value found, with an article
// ("string" → "a string"; "number 1.5" stays as it is).
func jsonValue(v string) string {
	switch v {
	case "string", "number", "bool", "array", "object":
		if v == "bool" {
			return "true or false"
		}
		if v == "array" || v == "object" {
			return "an " + v
		}
		return "a " + v
	case "":
		return "what it is"
	}
	return v
}
