package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/abi-engine/engine/internal/pgdb"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/tcpproxy"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// A statement the server never answers, while the server's host still
// does (a proxy that holds every byte), ends at its ceiling though its
// caller set no deadline: a read fails, a write sent on a warm connection
// fails of unknown outcome, and a write that never got a connection is
// not done. None says context.DeadlineExceeded, which would read as the
// caller's own deadline (504). Before, each waited without end.
func TestAStatementTheServerNeverAnswersEndsAtItsCeiling(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	for name, c := range map[string]struct {
		cold    bool // the pool's connections go before the statement
		call    func(s *Store, ctx context.Context) error
		notDone bool
	}{
		"Get": {call: func(s *Store, ctx context.Context) error {
			_, err := s.Get(ctx, "held")
			return err
		}},
		"SetIfAbsent": {call: func(s *Store, ctx context.Context) error {
			_, err := s.SetIfAbsent(ctx, "new", []byte("v1"), 0)
			return err
		}},
		"SetIfAbsentWithNoConnection": {cold: true, notDone: true, call: func(s *Store, ctx context.Context) error {
			_, err := s.SetIfAbsent(ctx, "new", []byte("v1"), 0)
			return err
		}},
	} {
		t.Run(name, func(t *testing.T) {
			s, proxy := openBehindProxy(t, dsn, pgtest.Table(t, dsn, "kvceiling"))
			term := ports.WithFencingToken(t.Context(), 5)
			if _, err := s.SetIfAbsent(term, "held", []byte("v0"), 0); err != nil {
				t.Fatal(err)
			}
			proxy.Block()
			t.Cleanup(proxy.Unblock) // before the store closes
			if c.cold {
				s.pool.Reset()
			}
			done := make(chan error, 1)
			go func() { done <- c.call(s, term) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("a %s the server never answers has not ended 20 s on, past its ceiling of 2 s", name)
			}
			switch {
			case c.notDone && !errors.Is(err, ports.ErrNotDone):
				t.Fatalf("%s: %v, want ErrNotDone", name, err)
			case !c.notDone && (!errors.Is(err, pgdb.ErrUnanswered) || errors.Is(err, ports.ErrNotDone)):
				t.Fatalf("%s: %v, want ErrUnanswered, not ErrNotDone", name, err)
			case errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("%s: %v says its caller's deadline passed", name, err)
			}
		})
	}
}

// openBehindProxy opens a store on table through a proxy to the server at
// dsn, its statements' ceiling 2 s, with one warm connection that is never
// pinged as it is taken (pingless), so that a statement goes on it unchecked.
func openBehindProxy(t *testing.T, dsn, table string) (*Store, *tcpproxy.Proxy) {
	t.Helper()
	proxied, proxy := pgtest.Proxied(t, dsn)
	s, err := open(t.Context(), Config{DSN: proxied, Table: table}, pgdb.Ceiling(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	pingless(t, s)
	return s, proxy
}

// openWithEveryConnectionHeld opens a store on table as openBehindProxy
// does, with one writer of batches, and holds every connection of its
// pool until the test ends, as statements the server never answers would
// hold them.
func openWithEveryConnectionHeld(t *testing.T, dsn, table string) *Store {
	t.Helper()
	s, _ := openBehindProxy(t, dsn, table)
	s.sets.close() // its writers took connections from the pool pingless closed
	s.sets = newSetter(1, s.ceiling, s.writes.Conn, s.writeSets)
	for range s.pool.Config().MaxConns {
		c, err := s.pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Release) // before the store closes
	}
	return s
}

// A batch takes its connection before its sets, and a batch whose callers
// set no deadline waits for one no longer than the store's ceiling, as
// every other statement does: its set is then not done. Before, it waited
// a constant minute whatever the store's ceiling. Every connection of the
// pool is held here, as statements the server never answers would hold
// them.
func TestABatchOfSetsWaitsForAConnectionNoLongerThanTheStoresCeiling(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	s := openWithEveryConnectionHeld(t, dsn, pgtest.Table(t, dsn, "kvbatchceiling"))
	done := make(chan error, 1)
	go func() { done <- s.Set(t.Context(), "k", []byte("v"), 0) }()
	select {
	case err := <-done:
		if !errors.Is(err, ports.ErrNotDone) || !errors.Is(err, pgdb.ErrUnanswered) {
			t.Fatalf("a set that got no connection: %v, want ErrNotDone and ErrUnanswered", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a set that gets no connection has not ended 20 s on, past the store's ceiling of 2 s")
	}
}

// A batch whose callers all set deadlines waits for a connection no longer
// than the store's ceiling either, however far off the latest of them is:
// every statement of the store ends at its ceiling (ADR 0022). Before, it
// waited until its callers' deadline, an hour here, holding up its writer
// and every set queued behind it. Every connection of the pool is held,
// as statements the server never answers would hold them.
func TestABatchWhoseCallersAllSetDeadlinesWaitsNoLongerThanTheStoresCeiling(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	s := openWithEveryConnectionHeld(t, dsn, pgtest.Table(t, dsn, "kvbatchdeadline"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- s.Set(ctx, "k", []byte("v"), 0) }()
	select {
	case err := <-done:
		if !errors.Is(err, ports.ErrNotDone) || !errors.Is(err, pgdb.ErrUnanswered) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a set that got no connection: %v, want ErrNotDone and ErrUnanswered, not its caller's deadline", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a set whose caller waits an hour has waited a minute for a connection, past the store's ceiling of 2 s")
	}
}
