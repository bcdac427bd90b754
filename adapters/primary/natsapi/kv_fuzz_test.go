package natsapi_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/ports"
)

func newMemoryKV(tb testing.TB) ports.KeyValue {
	tb.Helper()
	store, err := memory.Open(context.Background(), memory.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = store.Close() })
	return store
}

// FuzzKeyValueRequests feeds any body to every keyvalue endpoint: none may
// panic, and anything refused is a bad request, a missing key or a conflict.
func FuzzKeyValueRequests(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "kv", "*.json"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	svc := natsapi.KeyValue(newMemoryKV(f))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ep := range svc.Endpoints {
			_, err := ep.Handler(context.Background(), &natsapi.Call{Data: body})
			if err != nil && !errors.Is(err, ports.ErrInvalidArgument) && !errors.Is(err, ports.ErrNotFound) && !errors.Is(err, ports.ErrConflict) {
				t.Fatalf("%s(%q): unexpected error %v", ep.Name, body, err)
			}
		}
	})
}
