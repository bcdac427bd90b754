package pgdb_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	docpg "github.com/abi-engine/engine/adapters/secondary/document/postgres"
	kvpg "github.com/abi-engine/engine/adapters/secondary/keyvalue/postgres"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// strictDSN is dsn with the session's default isolation set to repeatable
// read, as a database or role may set it (ALTER DATABASE ... SET
// default_transaction_isolation).
func strictDSN(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-c default_transaction_isolation=repeatable\\ read")
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx reads + as itself
	return u.String()
}

// holdInsert inserts, from a session of its own, what sql inserts, and
// returns commit, which commits it once a statement of another session
// waits for it.
func holdInsert(t *testing.T, dsn, sql string, args ...any) (commit func()) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), sql, args...); err != nil {
		t.Fatal(err)
	}
	return func() {
		pgtest.AwaitBlocked(t, conn, "the store's statement never waited for the other session's insert")
		if err := tx.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// The stores' conditional writes are single statements whose races
// PostgreSQL's row locks decide under READ COMMITTED: a statement that
// waited for another transaction's row reads the row it committed. A
// database or role whose default isolation is stricter turns the same wait
// into a serialization failure, so a set if absent that lost to another
// writer failed as the engine's own error instead of answering that the key
// was taken, and a put if absent of a document failed where it should
// conflict. The stores run their sessions at READ COMMITTED whatever the
// server's default.
func TestAConditionalWriteThatWaitedForAnotherWriterLosesCleanlyUnderAStricterDefaultIsolation(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	strict := strictDSN(t, dsn)
	ctx := t.Context()

	t.Run("keyvalue", func(t *testing.T) {
		table := pgtest.Table(t, dsn, "isokv")
		kv, err := kvpg.Open(ctx, kvpg.Config{DSN: strict, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		// Closed after the other session, whose cleanup holdInsert
		// registers later and so runs first: a test that fails while the
		// store's statement waits for that session's row then ends, rather
		// than closing a pool that waits for the statement.
		t.Cleanup(func() { kv.Close() })
		commit := holdInsert(t, dsn, "INSERT INTO "+pgx.Identifier{table}.Sanitize()+" (key, value) VALUES ('k', 'other')")
		type result struct {
			won bool
			err error
		}
		done := make(chan result, 1)
		go func() {
			won, err := kv.SetIfAbsent(ctx, "k", []byte("mine"), 0)
			done <- result{won, err}
		}()
		commit()
		r := <-done
		if r.err != nil || r.won {
			t.Fatalf("SetIfAbsent that waited for another writer's key = %v, %v; want false, nil", r.won, r.err)
		}
		if v, err := kv.Get(ctx, "k"); err != nil || string(v) != "other" {
			t.Fatalf("Get = %q, %v; want the other writer's value", v, err)
		}
	})

	t.Run("document", func(t *testing.T) {
		table := pgtest.Table(t, dsn, "isodoc", "", "_collections")
		docs, err := docpg.Open(ctx, docpg.Config{DSN: strict, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { docs.Close() }) // after the other session, as above
		if err := docs.EnsureCollection(ctx, "c"); err != nil {
			t.Fatal(err)
		}
		commit := holdInsert(t, dsn, "INSERT INTO "+pgx.Identifier{table}.Sanitize()+
			` (collection, id, version, data) VALUES ('c', 'd', 1, '{"by":"other"}')`)
		done := make(chan error, 1)
		go func() {
			_, err := docs.Put(ctx, "c", "d", map[string]any{"by": "me"}, ports.IfVersion(0))
			done <- err
		}()
		commit()
		if err := <-done; !errors.Is(err, ports.ErrConflict) {
			t.Fatalf("a put if absent that waited for another writer's document: %v, want ErrConflict", err)
		}
	})
}
