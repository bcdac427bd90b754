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
// caller set no deadline: a get fails, and a put sent on a warm connection
// fails of unknown outcome. Neither says context.DeadlineExceeded, which
// would read as the caller's own deadline (504). Before, each waited
// without end.
func TestAStatementTheServerNeverAnswersEndsAtItsCeiling(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	for name, call := range map[string]func(s *Store, ctx context.Context) error{
		"Get": func(s *Store, ctx context.Context) error {
			_, err := s.Get(ctx, "c", "held")
			return err
		},
		"Put": func(s *Store, ctx context.Context) error {
			_, err := s.Put(ctx, "c", "held", map[string]any{"v": 1}, ports.Cond{})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, proxy := openBehindProxy(t, dsn, pgtest.Table(t, dsn, "docceiling", "", pgdb.CollectionsSuffix))
			term := ports.WithFencingToken(t.Context(), 5)
			if err := s.EnsureCollection(term, "c"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Put(term, "c", "held", map[string]any{"v": 0}, ports.Cond{}); err != nil {
				t.Fatal(err)
			}
			proxy.Block()
			t.Cleanup(proxy.Unblock) // before the store closes
			done := make(chan error, 1)
			go func() { done <- call(s, term) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("a %s the server never answers has not ended 20 s on, past its ceiling of 2 s", name)
			}
			if !errors.Is(err, pgdb.ErrUnanswered) || errors.Is(err, ports.ErrNotDone) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: %v, want ErrUnanswered, neither not done nor the caller's deadline", name, err)
			}
		})
	}
}

// openBehindProxy opens a store on table through a proxy to the server at
// dsn, its statements' ceiling 2 s, with one warm connection that is never
// pinged as it is taken (pgtest.Pingless), so that a statement goes on it
// unchecked.
func openBehindProxy(t *testing.T, dsn, table string) (*Store, *tcpproxy.Proxy) {
	t.Helper()
	proxied, proxy := pgtest.Proxied(t, dsn)
	s, err := open(t.Context(), Config{DSN: proxied, Table: table}, pgdb.Ceiling(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.pool = pgtest.Pingless(t, s.pool)
	s.writes = pgdb.NewFenced(s.pool, s.name, s.ceiling)
	return s, proxy
}

// A conditional delete that removes nothing reads what stands to say why,
// and a read cut short because its caller's answer was already due leaves
// the delete surely not done, which it now says (ports.ErrNotDone, 503);
// before, it failed as the read's ErrUnanswered alone, a 500, as if the
// document might have been removed.
func TestADeleteThatRemovedNothingAndCouldNotReadIsNotDone(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	s, err := Open(t.Context(), Config{DSN: dsn, Table: pgtest.Table(t, dsn, "docdelnotdone")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.EnsureCollection(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	d, err := s.Put(t.Context(), "c", "d", map[string]any{"v": 1}, ports.Cond{})
	if err != nil {
		t.Fatal(err)
	}
	late := ports.WithAnswerBy(t.Context(), time.Now().Add(-time.Minute))
	err = s.Delete(late, "c", "d", ports.IfVersion(d.Version+1))
	if !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("a delete that removed nothing and could not read: %v, want ErrNotDone", err)
	}
	if _, err := s.Get(t.Context(), "c", "d"); err != nil {
		t.Fatalf("the document is gone: %v", err)
	}
}
