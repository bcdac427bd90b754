package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/sqlite"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// open opens a handle on path, closed when the test ends. Two handles on
// one file stand for two engine processes on one host.
func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// term is a context of a call admitted under the serving term token.
func term(t *testing.T, token uint64) context.Context {
	return ports.WithFencingToken(t.Context(), token)
}

// twoHandles opens two handles on one new file and returns its path.
func twoHandles(t *testing.T) (path string, a, b *sqlite.Store) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "kv.sqlite")
	return path, open(t, path), open(t, path)
}

func mustSet(t *testing.T, ctx context.Context, s *sqlite.Store, key, value string) {
	t.Helper()
	if err := s.Set(ctx, key, []byte(value), 0); err != nil {
		t.Fatalf("Set(%q, %q): %v", key, value, err)
	}
}

func mustGet(t *testing.T, ctx context.Context, s *sqlite.Store, key, want string) {
	t.Helper()
	v, err := s.Get(ctx, key)
	if err != nil || string(v) != want {
		t.Fatalf("Get(%q) = %q, %v; want %q", key, v, err, want)
	}
}

// An engine paused across a takeover on this host resumes with calls of
// its old term in hand; once its successor has written, none of them may
// change the file. Before the fence, every one of these writes landed.
func TestAWriteUnderAnOlderTermIsRefused(t *testing.T) {
	_, old, successor := twoHandles(t)
	if err := old.Set(term(t, 5), "k", []byte("term 5"), 0); err != nil {
		t.Fatalf("Set under term 5: %v", err)
	}
	if err := successor.Set(term(t, 7), "k", []byte("term 7"), 0); err != nil {
		t.Fatalf("Set under term 7: %v", err)
	}
	writes := map[string]func() error{
		"Set": func() error { return old.Set(term(t, 5), "k", []byte("late"), 0) },
		"Set of a new key": func() error {
			return old.Set(term(t, 5), "other", []byte("late"), 0)
		},
		"SetIfAbsent": func() error {
			_, err := old.SetIfAbsent(term(t, 5), "absent", []byte("late"), 0)
			return err
		},
		"Delete": func() error {
			_, err := old.Delete(term(t, 5), "k")
			return err
		},
		"DeleteIfValue": func() error {
			_, err := old.DeleteIfValue(term(t, 5), "k", []byte("term 7"))
			return err
		},
	}
	for name, write := range writes {
		if err := write(); !errors.Is(err, ports.ErrFenced) {
			t.Errorf("%s under term 5 after term 7: err %v, want ErrFenced", name, err)
		}
	}
	mustGet(t, t.Context(), successor, "k", "term 7")
	for _, k := range []string{"other", "absent"} {
		if _, err := successor.Get(t.Context(), k); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("Get(%q) after a refused write: err %v, want ErrNotFound", k, err)
		}
	}
	// The same term, a newer one, and a tool's write with no term go on.
	if err := successor.Set(term(t, 7), "k", []byte("again 7"), 0); err != nil {
		t.Errorf("Set under term 7 again: %v", err)
	}
	if err := old.Set(term(t, 9), "k", []byte("term 9"), 0); err != nil {
		t.Errorf("Set under term 9: %v", err)
	}
	if err := old.Set(t.Context(), "k", []byte("no term"), 0); err != nil {
		t.Errorf("Set without a term: %v", err)
	}
	if err := successor.Set(term(t, 7), "k", []byte("late 7"), 0); !errors.Is(err, ports.ErrFenced) {
		t.Errorf("Set under term 7 after term 9: err %v, want ErrFenced", err)
	}
}

// The contract holds for calls under a term, as the engine makes them: the
// suite's handles are views of one handle, since one engine serves a term.
func TestKeyValueContractUnderATerm(t *testing.T) {
	contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
		s := open(t, filepath.Join(t.TempDir(), "kv.sqlite"))
		return func(*testing.T) ports.KeyValue { return contracttests.UnderTerm{KV: s, Token: 11} }
	}), contracttests.KeyValueCapabilities{Durable: true}) // the views share one term, so the fencing case cannot run on them
}
