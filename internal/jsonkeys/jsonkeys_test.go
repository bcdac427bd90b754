package jsonkeys_test

import (
	"testing"

	"github.com/abi-engine/engine/internal/jsonkeys"
)

// recorder keeps what SnakeCase reports instead of failing.
type recorder struct {
	testing.TB
	errors int
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.errors++ }
func (r *recorder) Fatalf(string, ...any) { r.errors++ }

func TestSnakeCase(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want int
	}{
		{`{"lease":{"holder":{"instance_id":"x","since_renewal_ns":1}},"services":[{"service":"kv"}]}`, 0},
		{`{"lease":{"holder":{"InstanceID":"x"}}}`, 1},
		{`{"items":[{"Released":true},{"ok":1,"camelCase":2}]}`, 2},
		{`{"data":{"UserKey":1},"id":"d"}`, 0},
		{`{"Data":{}}`, 1},
	} {
		r := &recorder{TB: t}
		jsonkeys.SnakeCase(r, []byte(c.doc), "data")
		if r.errors != c.want {
			t.Errorf("%s: %d keys refused, want %d", c.doc, r.errors, c.want)
		}
	}
}
