// Package jsonkeys checks, in tests, that a JSON document the engine prints
// names every field in snake_case, as /status and every --output json do.
package jsonkeys

import (
	"encoding/json"
	"regexp"
	"testing"
)

var snake = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// SnakeCase fails tb for every object key in doc, at any depth, that is
// not snake_case. The values under the keys in userData (a document's
// "data", say) are the user's own and are not checked.
func SnakeCase(tb testing.TB, doc []byte, userData ...string) {
	tb.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		tb.Fatalf("not JSON: %v\n%s", err, doc)
	}
	walk(tb, v, "", userData)
}

func walk(tb testing.TB, v any, path string, userData []string) {
	tb.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if !snake.MatchString(k) {
				tb.Errorf("key %s.%s is not snake_case", path, k)
			}
			skip := false
			for _, u := range userData {
				skip = skip || k == u
			}
			if !skip {
				walk(tb, child, path+"."+k, userData)
			}
		}
	case []any:
		for _, child := range v {
			walk(tb, child, path+"[]", userData)
		}
	}
}
