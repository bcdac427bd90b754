package contracttests

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// A store that keeps its reads for a serving term (KeepsReads in an
// adapter's capabilities, ADR 0011) answers a repeated get from memory.
// That is safe only while nobody else writes what it kept: it raises the
// fence on its first read of a term, so older terms can no longer write;
// it ends a term when told (ports.TermEnder) or when the fence shows the
// term is over; and a read through it never goes back behind a write that
// has returned. Two handles on one store stand for two engines here.

// kvKeptReadCases are the cases of a store with KeepsReads.
var kvKeptReadCases = []kvCase{
	{"AReadUnderANewTermRaisesTheFence", kvAReadRaisesTheFence},
	{"ANewTermDoesNotTrustWhatAnOldOneKept", kvANewTermReadsAgain},
	{"AnEndedTermReadsTheStore", kvAnEndedTermReadsTheStore},
	{"AFencedWriteEndsTheTerm", kvAFencedWriteEndsTheTerm},
	{"ATermTheFenceHasPassedIsNotKept", kvAPassedTermIsNotKept},
	{"KeptReadsFollowWrites", kvKeptReadsFollowWrites},
	{"AKeptValueExpires", kvAKeptValueExpires},
}

func kvSetUnder(t *testing.T, kv ports.KeyValue, token uint64, key, value string) {
	t.Helper()
	if err := kv.Set(underTerm(t, token), key, []byte(value), 0); err != nil {
		t.Fatalf("Set(%q, %q) under term %d: %v", key, value, token, err)
	}
}

func kvGetUnder(t *testing.T, kv ports.KeyValue, token uint64, key, want string) {
	t.Helper()
	v, err := kv.Get(underTerm(t, token), key)
	if err != nil || string(v) != want {
		t.Fatalf("Get(%q) under term %d = %q, %v; want %q", key, token, v, err, want)
	}
}

// kvKeeps reports whether kv answers key under token from memory.
func kvKeeps(t *testing.T, kv ports.KeyValue, token uint64, key string) bool {
	t.Helper()
	q, ok := kv.(ports.QuickGetter)
	if !ok {
		t.Fatalf("%T keeps reads but is no ports.QuickGetter", kv)
	}
	_, kept, err := q.QuickGet(underTerm(t, token), key)
	if err != nil {
		t.Fatalf("QuickGet(%q) under term %d: %v", key, token, err)
	}
	return kept
}

// A successor that has only read must still stop its predecessor's late
// writes: it keeps what it reads, and a write landing under it would leave
// it answering a value the store no longer holds.
func kvAReadRaisesTheFence(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	old, successor := open(t), open(t)
	kvSetUnder(t, old, termOld, "k", "before")
	kvGetUnder(t, successor, termNew, "k", "before")
	if !kvKeeps(t, successor, termNew, "k") {
		t.Fatal("a value read under a term is not kept")
	}
	err := old.Set(underTerm(t, termOld), "k", []byte("late"), 0)
	wantFenced(t, "Set after a newer term's read", err)
	kvGetUnder(t, successor, termNew, "k", "before")
	kvMustGet(t, open(t), "k", []byte("before"))
}

// A new term reads the store again: what an engine kept before another one
// served is not trusted.
func kvANewTermReadsAgain(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	a, b := open(t), open(t)
	kvSetUnder(t, a, 1, "k", "term 1")
	kvGetUnder(t, a, 1, "k", "term 1")
	kvSetUnder(t, b, 2, "k", "term 2")
	kvGetUnder(t, a, 3, "k", "term 2")
	if _, err := b.Delete(underTerm(t, 4), "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(underTerm(t, 5), "k"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get under term 5 after a delete under term 4: err %v, want ErrNotFound", err)
	}
}

// An engine that has released its lease drains the calls it already has,
// under its old term, while its successor writes: those reads must find
// the successor's writes, so the engine ends its term in the store before
// the release, and what it kept answers no more.
func kvAnEndedTermReadsTheStore(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	old, successor := open(t), open(t)
	ender, ok := old.(ports.TermEnder)
	if !ok {
		t.Fatalf("%T keeps reads but is no ports.TermEnder", old)
	}
	kvSetUnder(t, old, termOld, "k", "v1")
	kvGetUnder(t, old, termOld, "k", "v1")
	if !kvKeeps(t, old, termOld, "k") {
		t.Fatal("a value read under a term is not kept")
	}
	ender.EndTerm(termOld)
	if kvKeeps(t, old, termOld, "k") {
		t.Fatal("after EndTerm, a quick get under the ended term answers from memory")
	}
	kvSetUnder(t, successor, termNew, "k", "v2")
	kvGetUnder(t, old, termOld, "k", "v2")
	// A newer term of this handle keeps again.
	kvGetUnder(t, old, termLater, "k", "v2")
	if !kvKeeps(t, old, termLater, "k") {
		t.Fatal("a value read under a newer term is not kept")
	}
}

// A write refused by the fence shows a handle that its term is over: what
// it kept under it answers no more.
func kvAFencedWriteEndsTheTerm(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	old, successor := open(t), open(t)
	kvSetUnder(t, old, termOld, "k", "v1")
	kvGetUnder(t, old, termOld, "k", "v1")
	kvSetUnder(t, successor, termNew, "k", "v2")
	wantFenced(t, "Set", old.Set(underTerm(t, termOld), "other", []byte("x"), 0))
	kvGetUnder(t, old, termOld, "k", "v2")
}

// A handle that raised the fence by a write, and reads under that term
// only after a successor raised it further, must not begin keeping reads
// for a term the fence has passed.
func kvAPassedTermIsNotKept(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	old, successor := open(t), open(t)
	kvSetUnder(t, old, termOld, "k", "v1")
	kvGetUnder(t, successor, termNew, "k", "v1")
	kvGetUnder(t, old, termOld, "k", "v1")
	if kvKeeps(t, old, termOld, "k") {
		t.Fatal("a read under a term the fence has passed was kept")
	}
	kvSetUnder(t, successor, termNew, "k", "v2")
	kvGetUnder(t, old, termOld, "k", "v2")
}

// Under one term, reads through a handle never go back: each returns at
// least the newest value whose write had returned when the read began, and
// no older value than the read before it.
func kvKeptReadsFollowWrites(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	s := open(t)
	// Each call has its own callTimeout: one context for the whole case
	// gave 300 writes and the reads beside them ten seconds together, which
	// a loaded machine can run out of with no store at fault.
	under := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ports.WithFencingToken(t.Context(), termNew), callTimeout)
	}
	set := func(key string, v int64) error {
		c, cancel := under()
		defer cancel()
		return s.Set(c, key, []byte(strconv.FormatInt(v, 10)), 0)
	}
	const writes = 300
	keys := []string{"a", "b"}
	var done [2]atomic.Int64 // the newest value written and returned, per key
	for _, k := range keys {
		if err := set(k, 0); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := range 4 {
		wg.Go(func() {
			var last [2]int64
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				i := (r + n) % 2
				floor := done[i].Load()
				c, cancel := under()
				v, err := s.Get(c, keys[i])
				cancel()
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
		})
	}
	for n := int64(1); n <= writes; n++ {
		i := n % 2
		if n%7 == 0 {
			c, cancel := under()
			_, err := s.Delete(c, keys[i])
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			c, cancel = under()
			ok, err := s.SetIfAbsent(c, keys[i], []byte(strconv.FormatInt(n, 10)), 0)
			cancel()
			if err != nil || !ok {
				t.Fatalf("SetIfAbsent after Delete = %v, %v", ok, err)
			}
		} else if err := set(keys[i], n); err != nil {
			t.Fatal(err)
		}
		done[i].Store(n)
	}
	close(stop)
	wg.Wait()
}

// A value kept under a term expires no later than the store says it has:
// once a handle that keeps nothing finds it gone, so does the one that
// kept it.
func kvAKeptValueExpires(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	s, plain := open(t), open(t)
	under := underTerm(t, termNew)
	if err := s.Set(under, "k", []byte("v"), kvShortTTL); err != nil {
		t.Fatal(err)
	}
	kvGetUnder(t, s, termNew, "k", "v")
	if !kvKeeps(t, s, termNew, "k") {
		t.Fatal("a value with a TTL read under a term is not kept")
	}
	kvAwaitExpiry(t, plain, "k", "Set")
	if kvKeeps(t, s, termNew, "k") {
		t.Fatal("a value the store has expired is still answered from memory")
	}
	if _, err := s.Get(under, "k"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get under the term after the value expired: %v, want ErrNotFound", err)
	}
}
