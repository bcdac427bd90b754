package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// A successor that has only read must still stop its predecessor's late
// writes: it keeps what it reads, and a write landing under it would leave
// it answering a value the file no longer holds.
func TestAReadUnderANewTermRaisesTheFence(t *testing.T) {
	path, old, successor := twoHandles(t)
	mustSet(t, term(t, 3), old, "k", "before")
	mustGet(t, term(t, 4), successor, "k", "before")
	if err := old.Set(term(t, 3), "k", []byte("late"), 0); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Set under term 3 after a read under term 4: err %v, want ErrFenced", err)
	}
	mustGet(t, term(t, 4), successor, "k", "before")
	mustGet(t, t.Context(), open(t, path), "k", "before")
}

// A new term reads the file again: what an engine kept before another one
// served is not trusted.
func TestANewTermDoesNotTrustWhatAnOldOneKept(t *testing.T) {
	_, a, b := twoHandles(t)
	mustSet(t, term(t, 1), a, "k", "term 1")
	mustGet(t, term(t, 1), a, "k", "term 1")
	mustSet(t, term(t, 2), b, "k", "term 2")
	mustGet(t, term(t, 3), a, "k", "term 2")
	if _, err := b.Delete(term(t, 4), "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(term(t, 5), "k"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get under term 5 after a delete under term 4: err %v, want ErrNotFound", err)
	}
}

// An engine that has released its lease drains the calls it already has,
// under its old term, while its successor writes: those reads must find
// the successor's writes, so the engine ends its term in the store before
// the release, and what it kept answers no more.
func TestAnEndedTermReadsTheFile(t *testing.T) {
	_, old, successor := twoHandles(t)
	mustSet(t, term(t, 5), old, "k", "v1")
	mustGet(t, term(t, 5), old, "k", "v1")
	if _, ok, _ := old.QuickGet(term(t, 5), "k"); !ok {
		t.Fatal("a value read under term 5 is not kept")
	}
	old.EndTerm(5)
	mustSet(t, term(t, 7), successor, "k", "v2")
	mustGet(t, term(t, 5), old, "k", "v2")
	if v, ok, _ := old.QuickGet(term(t, 5), "k"); ok {
		t.Fatalf("after EndTerm(5), a quick get under term 5 answers %q from memory", v)
	}
	// A newer term of this handle keeps again.
	mustGet(t, term(t, 9), old, "k", "v2")
	if _, ok, _ := old.QuickGet(term(t, 9), "k"); !ok {
		t.Fatal("a value read under term 9 is not kept")
	}
}

// A write refused by the fence shows this handle that its term is over:
// what it kept under it answers no more.
func TestAFencedWriteEndsTheTerm(t *testing.T) {
	_, old, successor := twoHandles(t)
	mustSet(t, term(t, 5), old, "k", "v1")
	mustGet(t, term(t, 5), old, "k", "v1")
	mustSet(t, term(t, 7), successor, "k", "v2")
	if err := old.Set(term(t, 5), "other", []byte("x"), 0); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Set under term 5 after term 7: err %v, want ErrFenced", err)
	}
	mustGet(t, term(t, 5), old, "k", "v2")
}

// A handle that raised the fence by a write, and reads under that term
// only after a successor raised it further, must not begin keeping reads
// for a term the fence has passed.
func TestATermTheFenceHasPassedIsNotKept(t *testing.T) {
	_, old, successor := twoHandles(t)
	mustSet(t, term(t, 5), old, "k", "v1")
	mustGet(t, term(t, 7), successor, "k", "v1")
	mustGet(t, term(t, 5), old, "k", "v1")
	mustSet(t, term(t, 7), successor, "k", "v2")
	mustGet(t, term(t, 5), old, "k", "v2")
}

// Under one term, reads through a handle never go back: each returns at
// least the newest value whose write had returned when the read began, and
// no older value than the read before it.
func TestKeptReadsFollowWrites(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "kv.sqlite"))
	ctx := term(t, 1)
	const writes = 400
	keys := []string{"a", "b"}
	var done [2]atomic.Int64 // the newest value written and returned, per key
	for _, k := range keys {
		if err := s.Set(ctx, k, []byte("0"), 0); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last [2]int64
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				i := (r + n) % 2
				floor := done[i].Load()
				v, err := s.Get(ctx, keys[i])
				if errors.Is(err, ports.ErrNotFound) {
					continue // between a Delete and the SetIfAbsent after it
				}
				if err != nil {
					t.Errorf("Get(%q): %v", keys[i], err)
					return
				}
				got, _ := strconv.ParseInt(string(v), 10, 64)
				if got < floor || got < last[i] {
					t.Errorf("Get(%q) = %d after %d was written and %d read", keys[i], got, floor, last[i])
					return
				}
				last[i] = got
			}
		}()
	}
	for n := int64(1); n <= writes; n++ {
		i := n % 2
		if n%7 == 0 {
			if _, err := s.Delete(ctx, keys[i]); err != nil {
				t.Fatal(err)
			}
			ok, err := s.SetIfAbsent(ctx, keys[i], []byte(strconv.FormatInt(n, 10)), 0)
			if err != nil || !ok {
				t.Fatalf("SetIfAbsent after Delete = %v, %v", ok, err)
			}
		} else if err := s.Set(ctx, keys[i], []byte(strconv.FormatInt(n, 10)), 0); err != nil {
			t.Fatal(err)
		}
		done[i].Store(n)
	}
	close(stop)
	wg.Wait()
}

// A value kept under a term still expires on time.
func TestAKeptValueExpires(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "kv.sqlite"))
	ctx := term(t, 1)
	if err := s.Set(ctx, "k", []byte("v"), 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	mustGet(t, ctx, s, "k", "v")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Get(ctx, "k")
		if errors.Is(err, ports.ErrNotFound) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("a value with a 200 ms TTL is still read after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The contract holds for calls under a term, as the engine makes them: the
// suite's handles are views of one handle, since one engine serves a term.
func TestKeyValueContractUnderATerm(t *testing.T) {
	contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
		s := open(t, filepath.Join(t.TempDir(), "kv.sqlite"))
		return func(*testing.T) ports.KeyValue { return termed{s: s, token: 11} }
	}), contracttests.KeyValueCapabilities{Durable: true}) // the views share one term, so the fencing case cannot run on them
}

// termed is a view of a handle whose every call carries token. Closing it
// leaves the handle open for the other views.
type termed struct {
	s     *sqlite.Store
	token uint64
}

func (v termed) ctx(ctx context.Context) context.Context { return ports.WithFencingToken(ctx, v.token) }

func (v termed) Get(ctx context.Context, key string) ([]byte, error) { return v.s.Get(v.ctx(ctx), key) }
func (v termed) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return v.s.Set(v.ctx(ctx), key, value, ttl)
}
func (v termed) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	return v.s.SetIfAbsent(v.ctx(ctx), key, value, ttl)
}
func (v termed) Delete(ctx context.Context, key string) (bool, error) {
	return v.s.Delete(v.ctx(ctx), key)
}
func (v termed) DeleteIfValue(ctx context.Context, key string, value []byte) (bool, error) {
	return v.s.DeleteIfValue(v.ctx(ctx), key, value)
}
func (v termed) Exists(ctx context.Context, key string) (bool, error) {
	return v.s.Exists(v.ctx(ctx), key)
}
func (v termed) ListKeys(ctx context.Context, prefix string, limit int, cursor string) ([]string, string, error) {
	return v.s.ListKeys(v.ctx(ctx), prefix, limit, cursor)
}
func (v termed) DeleteExpired(ctx context.Context) (int, error) {
	return v.s.DeleteExpired(v.ctx(ctx))
}
func (v termed) Close() error { return nil }

func (v termed) String() string { return fmt.Sprintf("term %d", v.token) }
