package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/abi-engine/engine/internal/pgdb"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// A write does not go on a pooled connection whose session the server has
// ended while it sat idle (pg_terminate_backend here; a restart of the
// server, or a pooler in front of it closing idle connections, alike),
// however recently the connection was used: it goes on another, under a
// term or not, and is written. Before, it was sent on the closed
// connection, read the server's word that it had ended the session
// (FATAL), and failed of unknown outcome (500), though nothing of it had
// reached the server. The pool does not ping a connection as it hands it
// out (pgtest.Pingless), as pgxpool would one idle for over a second,
// which a loaded machine may reach at any moment: the write finds the
// connection as if it had been used a moment before.
func TestAWriteGoesOnNoConnectionWhoseSessionTheServerEnded(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	one := pgtest.WithParam(t, dsn, "pool_max_conns", "1") // the write is handed the ended connection
	s, err := Open(t.Context(), Config{DSN: one, Table: pgtest.Table(t, dsn, "docended", "", pgdb.CollectionsSuffix)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.pool = pgtest.Pingless(t, s.pool)
	s.writes = pgdb.NewFenced(s.pool, s.name, s.ceiling)
	termed := ports.WithFencingToken(t.Context(), 5)
	writes := map[string]func(ctx context.Context, id string) error{
		"EnsureCollection": func(ctx context.Context, id string) error { return s.EnsureCollection(ctx, id) },
		"Put": func(ctx context.Context, id string) error {
			_, err := s.Put(ctx, "c", id, map[string]any{"v": 1.0}, ports.Cond{})
			return err
		},
		"Delete": func(ctx context.Context, id string) error { return s.Delete(ctx, "c", id+"-gone", ports.Cond{}) },
	}
	for id, ctx := range map[string]context.Context{"termed": termed, "untermed": t.Context()} {
		if err := s.EnsureCollection(termed, "c"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(termed, "c", id+"-gone", map[string]any{"v": 0.0}, ports.Cond{}); err != nil {
			t.Fatal(err)
		}
		for name, write := range writes {
			pgtest.TerminateIdle(t, s.pool, dsn)
			if err := write(ctx, id); err != nil {
				t.Errorf("a %s (%s), on a pool whose connection's session the server ended: %v", name, id, err)
			}
		}
		if err := s.requireCollection(t.Context(), id); err != nil {
			t.Errorf("the collection %s: %v", id, err)
		}
		if d, err := s.Get(t.Context(), "c", id); err != nil || d.Data["v"] != 1.0 {
			t.Errorf("the document %s = %+v, %v; want it put", id, d, err)
		}
		if _, err := s.Get(t.Context(), "c", id+"-gone"); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("the document %s-gone: %v, want it deleted", id, err)
		}
	}
}
