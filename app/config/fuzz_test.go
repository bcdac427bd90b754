package config

import (
	"bytes"
	"testing"
)

// FuzzLoad feeds the loader arbitrary files. It must never panic, every
// error must be a configuration error, and whatever it accepts must render
// to YAML that loads again to the same configuration.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(""))
	f.Add([]byte("nats: {engine: {role: auto, rollout_id: r7}}\n"))
	getenv := func(name string) string {
		if name == "FUZZ_DSN" {
			return "postgres://u:p@h/db"
		}
		return ""
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data, getenv)
		if err != nil {
			if _, ok := err.(*Error); !ok && !isJoined(err) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		out, err := c.YAML()
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		again, err := Parse("again.yaml", out, func(string) string { return "" })
		if err != nil {
			t.Fatalf("rendering does not load again: %v\n%s", err, out)
		}
		out2, err := again.YAML()
		if err != nil {
			t.Fatalf("render again: %v", err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("rendering changed on a round trip:\n%s\n---\n%s", out, out2)
		}
		c.Masked()
	})
}

// isJoined reports an errors.Join of configuration errors, which is how
// several unknown keys are reported at once.
func isJoined(err error) bool {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return false
	}
	for _, e := range j.Unwrap() {
		if _, ok := e.(*Error); !ok {
			return false
		}
	}
	return true
}
