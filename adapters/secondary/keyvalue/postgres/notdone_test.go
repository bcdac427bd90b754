package postgres

import (
	"context"
	"errors"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/abi-engine/engine/internal/pgdb"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// A write the server rolls back to break a deadlock did not happen, and
// may be sent again: it fails as ports.ErrNotDone, a set (which goes in a
// batch) as a conditional write does. The key's value is the one before.
func TestAWriteRolledBackForADeadlockIsNotDone(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	writes := map[string]func(s *Store, term context.Context) error{
		"Set": func(s *Store, term context.Context) error { return s.Set(term, "held", []byte("v1"), 0) },
		"SetIfAbsent": func(s *Store, term context.Context) error {
			_, err := s.SetIfAbsent(term, "held", []byte("v1"), 0)
			return err
		},
		"DeleteIfValue": func(s *Store, term context.Context) error {
			_, err := s.DeleteIfValue(term, "held", []byte("v0"))
			return err
		},
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			table := pgtest.Table(t, dsn, "kvdeadlock")
			s, term, _ := openWithKeyToHold(t, dsn, dsn, table, 5)
			hold := "SELECT 1 FROM " + pgx.Identifier{table}.Sanitize() + " WHERE key = 'held' FOR UPDATE"
			reset := func() {
				if err := s.Set(term, "held", []byte("v0"), 0); err != nil {
					t.Fatal(err)
				}
			}
			err := pgtest.Deadlocked(t, dsn, table, hold, func() error { return write(s, term) }, reset)
			if !errors.Is(err, ports.ErrNotDone) {
				t.Fatalf("a %s the server rolled back for a deadlock: %v, want ErrNotDone", name, err)
			}
			if v, err := s.Get(term, "held"); err != nil || string(v) != "v0" {
				t.Fatalf("the key after a %s rolled back = %q, %v; want v0", name, v, err)
			}
		})
	}
}

// A serialization failure rolls its transaction back: the set it failed
// was not done, and says so, while the sets of other callers that queued
// with it in one batch are written. A store's sessions run at READ
// COMMITTED, where the server raises it only behind a pooler that hands
// them a stricter transaction; a trigger raises it here.
func TestASetRefusedForASerializationFailureIsNotDone(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "kvserial")
	s, term, conn := openWithKeyToHold(t, dsn, dsn, table, 5)
	quoted := pgx.Identifier{table}.Sanitize()
	fn := pgx.Identifier{table + "_serial"}.Sanitize()
	if _, err := conn.Exec(t.Context(), `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.key = 'refused' THEN
				RAISE EXCEPTION 'could not serialize access' USING ERRCODE = 'serialization_failure';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER serial BEFORE INSERT OR UPDATE ON `+quoted+` FOR EACH ROW EXECUTE FUNCTION `+fn+`()`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(t.Context(), "DROP FUNCTION IF EXISTS "+fn+" CASCADE") })

	good := []string{"a", "k1", "z"}
	errs := setInOneBatch(t, s, term, good, func() error { return s.Set(term, "refused", []byte("v"), 0) })
	if err := errs[len(good)]; !errors.Is(err, ports.ErrNotDone) {
		t.Fatalf("a set failed by a serialization failure: %v, want ErrNotDone", err)
	}
	goodSetsWritten(t, s, term, good, errs, "a set failed by a serialization failure")
}

// A write the server cancelled past statement_timeout rolled back, and may
// be sent again: it fails as ports.ErrNotDone, under a term or not, a set
// (which goes in a batch) as a conditional write does. Each waits for the
// key's row, which another transaction holds, until the server cancels
// it; the key keeps its value.
func TestAWriteCancelledPastStatementTimeoutIsNotDone(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "kvtimeout")
	s, termed, conn := openWithKeyToHold(t, dsn, dsn, table, 5)
	// Only the writes run under the timeout: the store's schema, its first
	// set and the last read, run under it too, were cancelled on a loaded
	// machine.
	restore := onPool(t, s, pgtest.WithParam(t, dsn, "statement_timeout", "200")) // milliseconds, set as each connection opens
	holder, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback(context.Background()) })
	if _, err := holder.Exec(t.Context(), "SELECT 1 FROM "+pgx.Identifier{table}.Sanitize()+" WHERE key = 'held' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	writes := map[string]func(ctx context.Context) error{
		"Set": func(ctx context.Context) error { return s.Set(ctx, "held", []byte("v1"), 0) },
		"SetIfAbsent": func(ctx context.Context) error {
			_, err := s.SetIfAbsent(ctx, "held", []byte("v1"), 0)
			return err
		},
		"DeleteIfValue": func(ctx context.Context) error {
			_, err := s.DeleteIfValue(ctx, "held", []byte("v0"))
			return err
		},
	}
	for under, ctx := range map[string]context.Context{"under a term": termed, "with no term": t.Context()} {
		for name, write := range writes {
			if err := write(ctx); !errors.Is(err, ports.ErrNotDone) {
				t.Errorf("a %s %s, cancelled past statement_timeout: %v, want ErrNotDone", name, under, err)
			}
		}
	}
	restore()
	if err := holder.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(termed, "held"); err != nil || string(v) != "v0" {
		t.Fatalf("the key after writes the server cancelled = %q, %v; want v0", v, err)
	}
}

// onPool has s read and write through a pool of its own opened on dsn,
// until restore puts s's own pool back.
func onPool(t *testing.T, s *Store, dsn string) (restore func()) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	use := func(p *pgxpool.Pool) {
		s.pool, s.writes = p, pgdb.NewFenced(p, s.name, s.ceiling)
		s.sets.conn = s.writes.Conn
	}
	own := s.pool
	use(pool)
	return func() { use(own) }
}

// A write whose connection never opens was never sent: it fails as
// ports.ErrNotDone, a set (which goes in a batch) as every other write.
func TestAWriteWhoseConnectionNeverOpenedIsNotDone(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	proxied, proxy := pgtest.Proxied(t, dsn)
	table := pgtest.Table(t, dsn, "kvnoconn")
	s, term, _ := openWithKeyToHold(t, dsn, proxied, table, 5)

	proxy.Down()
	s.pool.Reset() // every pooled connection goes; a write must open one
	writes := map[string]func() error{
		"Set": func() error { return s.Set(term, "held", []byte("v1"), 0) },
		"SetIfAbsent": func() error {
			_, err := s.SetIfAbsent(term, "new", []byte("v1"), 0)
			return err
		},
		"Delete": func() error {
			_, err := s.Delete(term, "held")
			return err
		},
	}
	for name, write := range writes {
		if err := write(); !errors.Is(err, ports.ErrNotDone) {
			t.Errorf("a %s whose connection never opened: %v, want ErrNotDone", name, err)
		}
	}
	proxy.Up()
	if v, err := s.Get(term, "held"); err != nil || string(v) != "v0" {
		t.Fatalf("the key after writes never sent = %q, %v; want v0", v, err)
	}
}

// A batch whose check of the fence waited too long for the fence row,
// which a write of an older term holds, is not sent again set by set: the
// cause is the term's, each set alone would wait as long again, and every
// set of the batch is answered not done at once. Once the older write has
// ended, the sets are written.
func TestABatchWhoseFenceCheckWaitedTooLongIsNotSentAgainSetBySet(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "kvfenceheld")
	s, _, conn := openWithKeyToHold(t, dsn, dsn, table, 5)
	older, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = older.Rollback(context.Background()) })
	// As a check of term 5 that passed holds the row.
	if _, err := older.Exec(t.Context(), "SELECT 1 FROM abi_engine_fence WHERE scope = $1 FOR SHARE", table); err != nil {
		t.Fatal(err)
	}

	var statements atomic.Int32
	s.sets.close()
	w := newSetter(0, pgdb.DefaultCeiling, s.writes.Conn, func(ctx context.Context, c *pgxpool.Conn, t term, batch []*setReq) error {
		statements.Add(1)
		return s.writeSets(ctx, c, t, batch)
	})
	keys := []string{"a", "b", "c"}
	w.reqs = make(chan *setReq, len(keys))
	s.sets = w
	newer := ports.WithFencingToken(t.Context(), 7)
	errs := make([]error, len(keys))
	var callers sync.WaitGroup
	for i, key := range keys {
		callers.Go(func() { errs[i] = s.Set(newer, key, []byte("v"), 0) })
	}
	for deadline := time.Now().Add(time.Minute); len(w.reqs) < len(keys); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sets queued", len(w.reqs), len(keys))
		}
		time.Sleep(time.Millisecond)
	}
	w.wg.Go(w.run)
	callers.Wait()
	for i, err := range errs {
		if !errors.Is(err, ports.ErrNotDone) {
			t.Errorf("the set of %q behind a held fence row: %v, want ErrNotDone", keys[i], err)
		}
	}
	if n := statements.Load(); n != 1 {
		t.Errorf("a batch of %d sets behind a held fence row went in %d statements, want 1", len(keys), n)
	}

	if err := older.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		if err := s.Set(newer, key, []byte("v"), 0); err != nil {
			t.Fatalf("the set of %q once the older write ended: %v", key, err)
		}
	}
}

// A write whose context ends while it waits for a connection to come free
// was never sent: it fails as ports.ErrNotDone, under a term (its check of
// the fence and it going in one batch) or not, a set whose batch waits for
// one as a lone write does. The pool's one connection is held throughout,
// so each write can only give up; the key keeps its value.
func TestAWriteWhoseContextEndedWaitingForAConnectionIsNotDone(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "kvnofree")
	s, termed, _ := openWithKeyToHold(t, dsn, pgtest.WithParam(t, dsn, "pool_max_conns", "1"), table, 5)
	held, err := s.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	writes := map[string]func(ctx context.Context) error{
		"SetIfAbsent": func(ctx context.Context) error {
			_, err := s.SetIfAbsent(ctx, "new", []byte("v1"), 0)
			return err
		},
		"Delete": func(ctx context.Context) error {
			_, err := s.Delete(ctx, "held")
			return err
		},
		"DeleteIfValue": func(ctx context.Context) error {
			_, err := s.DeleteIfValue(ctx, "held", []byte("v0"))
			return err
		},
		// Its batch waits for the connection on the store's writer, and
		// the caller gives up first.
		"Set": func(ctx context.Context) error { return s.Set(ctx, "held", []byte("v1"), 0) },
	}
	for under, base := range map[string]context.Context{"under a term": termed, "with no term": t.Context()} {
		for name, write := range writes {
			ctx, cancel := context.WithTimeout(base, 100*time.Millisecond)
			err := write(ctx)
			cancel()
			if !errors.Is(err, ports.ErrNotDone) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a %s %s, given up waiting for a connection: %v, want ErrNotDone and the context's error", name, under, err)
			}
		}
	}
	held.Release()
	if v, err := s.Get(termed, "held"); err != nil || string(v) != "v0" {
		t.Fatalf("the key after writes never sent = %q, %v; want v0", v, err)
	}
	if ok, err := s.Exists(termed, "new"); err != nil || ok {
		t.Fatalf("a SetIfAbsent never sent wrote its key: %v, %v", ok, err)
	}
}

// A write sent on a connection whose network then drops every packet,
// with no reset, fails within a bound, where the kernel would retry its
// bytes for about a quarter of an hour and an engine's call, which has no
// deadline, wait as long, holding the connection. Its bytes were sent, so
// its outcome is unknown: it is never not done. The pool does not ping the
// connection as the write takes it (pingless), so the write's own bytes
// are the first into the cut network, however long the test took to cut
// it.
func TestAWriteIntoANetworkThatWentDarkFailsUnknownWithinABound(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	addr, cut := pgtest.Blackhole(t, net.JoinHostPort(u.Hostname(), port))
	u.Host = addr
	dark := pgtest.WithParam(t, u.String(), "pool_max_conns", "1") // the write goes on the connection opened before the cut
	table := pgtest.Table(t, dsn, "kvdark")
	s, termed, _ := openWithKeyToHold(t, dsn, dark, table, 5)
	pingless(t, s)

	cut()
	done := make(chan error, 1)
	go func() {
		_, err := s.SetIfAbsent(termed, "new", []byte("v1"), 0)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, ports.ErrNotDone) {
			t.Fatalf("a write sent into a network gone dark: %v, want its outcome unknown", err)
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("a write sent into a network gone dark has not failed after 5 minutes")
	}
}

// pingless has s write through a pool of its own settings and dialer whose
// connections are never pinged as they are taken, and opens its one
// connection (pgtest.Pingless). pgxpool pings one idle for over a second:
// a ping into a cut network fails, the connection goes, a new one cannot
// open, and the write after it, never sent, is not done, which is right
// but not the case a test of a write sent into the cut means to hold.
func pingless(t *testing.T, s *Store) {
	t.Helper()
	s.pool = pgtest.Pingless(t, s.pool)
	s.writes = pgdb.NewFenced(s.pool, s.name, s.ceiling)
}

// A set whose caller gives up while its batch waits for a connection was
// never sent, and is told so (ports.ErrNotDone), though the batch goes on
// waiting for a caller who still waits: the set is then left out of it.
// The pool's one connection is held until the first caller has given up.
func TestASetGivenUpWhileItsBatchWaitsForAConnectionIsNotDone(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "kvbatchnofree")
	s, termed, _ := openWithKeyToHold(t, dsn, pgtest.WithParam(t, dsn, "pool_max_conns", "1"), table, 5)
	held, err := s.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(held.Release)

	w, start := queueSets(s, 2)
	// The caller gives up a while after both sets are queued and the
	// batch has started, so that the batch waits for the held connection
	// then; were its patience counted from before its set was queued, a
	// loaded machine could end it before the set reached the queue.
	soon, cancel := context.WithCancel(termed)
	defer cancel()
	gaveUp, waited := make(chan error, 1), make(chan error, 1)
	go func() { gaveUp <- s.Set(soon, "gone", []byte("v"), 0) }()
	go func() { waited <- s.Set(termed, "kept", []byte("v"), 0) }()
	for deadline := time.Now().Add(time.Minute); len(w.reqs) < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 sets queued", len(w.reqs))
		}
		time.Sleep(time.Millisecond)
	}
	start()
	time.AfterFunc(100*time.Millisecond, cancel)
	if err := <-gaveUp; !errors.Is(err, ports.ErrNotDone) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a set given up while its batch waited for a connection: %v, want ErrNotDone and the context's error", err)
	}
	held.Release()
	if err := <-waited; err != nil {
		t.Fatalf("the set of the caller who waited: %v", err)
	}
	if ok, err := s.Exists(termed, "gone"); err != nil || ok {
		t.Fatalf("a set given up before its batch had a connection was written: %v, %v", ok, err)
	}
	if v, err := s.Get(termed, "kept"); err != nil || string(v) != "v" {
		t.Fatalf("kept = %q, %v; want v", v, err)
	}
}

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
	writeAfterTheServerEndedTheSession(t, testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false))
}

// The same holds over TLS (sslmode=require): the look at the socket sees
// the server's last message as TLS records, or its close, where pgx reads
// through a tls.Conn, and does not take them for silence. A server that
// takes no TLS skips the test.
func TestAWriteGoesOnNoConnectionWhoseSessionTheServerEndedOverTLS(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	tls := pgtest.WithParam(t, dsn, "sslmode", "require")
	conn, err := pgx.Connect(t.Context(), tls)
	if err != nil {
		t.Skipf("the server takes no TLS connection: %v", err)
	}
	_ = conn.Close(t.Context())
	writeAfterTheServerEndedTheSession(t, tls)
}

// writeAfterTheServerEndedTheSession has a store on dsn write, under a term
// or not, each time after the server ended the session of its pool's one
// connection, and checks that every write is written.
func writeAfterTheServerEndedTheSession(t *testing.T, dsn string) {
	table := pgtest.Table(t, dsn, "kvended")
	one := pgtest.WithParam(t, dsn, "pool_max_conns", "1") // the write is handed the ended connection
	s, termed, _ := openWithKeyToHold(t, dsn, one, table, 5)
	s.sets.close()
	s.pool = pgtest.Pingless(t, s.pool)
	s.writes = pgdb.NewFenced(s.pool, s.name, s.ceiling)
	s.sets = newSetter(1, s.ceiling, s.writes.Conn, s.writeSets)
	writes := map[string]func(ctx context.Context) error{
		"Set": func(ctx context.Context) error { return s.Set(ctx, "set", []byte("v"), 0) },
		"SetIfAbsent": func(ctx context.Context) error {
			_, err := s.SetIfAbsent(ctx, "new", []byte("v"), 0)
			return err
		},
		"Delete": func(ctx context.Context) error {
			_, err := s.Delete(ctx, "held")
			return err
		},
	}
	for under, ctx := range map[string]context.Context{"under a term": termed, "with no term": t.Context()} {
		for name, write := range writes {
			pgtest.TerminateIdle(t, s.pool, dsn)
			if err := write(ctx); err != nil {
				t.Errorf("a %s %s, on a pool whose connection's session the server ended: %v", name, under, err)
			}
		}
	}
	for key, want := range map[string]bool{"set": true, "new": true, "held": false} {
		if ok, err := s.Exists(termed, key); err != nil || ok != want {
			t.Errorf("%s exists = %v, %v; want %v", key, ok, err, want)
		}
	}
}

// A write under a term whose session the server ends before the check of
// the fence has answered fails of unknown outcome, and does not say the
// server failed the check (pgdb.ErrCheckFailed), which says the write
// after the check never ran: the check and the write commit under one
// Sync, so the word that the session ended (FATAL), read in the check's
// place, may follow a commit (a pooler's own, or a server's interrupted
// between its commit and its flush). Each write is handed a new
// connection, whose preparing of its statements waits for the store's
// table, which another transaction holds in ACCESS EXCLUSIVE mode, until
// the server ends the session.
func TestAnEndOfTheSessionInPlaceOfTheFenceCheckIsNotACheckFailure(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	s, termed, conn := openWithKeyToHold(t, dsn, pgtest.WithParam(t, dsn, "pool_max_conns", "1"), pgtest.Table(t, dsn, "kvendcheck"), 5)
	writes := map[string]func() error{
		"Set": func() error { return s.Set(termed, "set", []byte("v"), 0) },
		"SetIfAbsent": func() error {
			_, err := s.SetIfAbsent(termed, "new", []byte("v"), 0)
			return err
		},
		"Delete": func() error {
			_, err := s.Delete(termed, "held")
			return err
		},
	}
	for name, write := range writes {
		s.pool.Reset() // the write opens a new connection, and prepares its statements on it
		err := endSessionWhileItWaits(t, conn, "LOCK TABLE "+s.table+" IN ACCESS EXCLUSIVE MODE", write)
		var pgErr *pgconn.PgError
		switch {
		case !errors.As(err, &pgErr) || pgErr.Code != "57P01":
			t.Errorf("a %s whose session the server ended before its check of the fence answered: %v, want the server's FATAL", name, err)
		case errors.Is(err, pgdb.ErrCheckFailed) || errors.Is(err, ports.ErrNotDone):
			t.Errorf("a %s whose session the server ended before its check of the fence answered: %v, want its outcome unknown, not the check failed", name, err)
		}
	}
}

// endSessionWhileItWaits runs hold in a transaction on conn, then write,
// and has the server end the session of write once it waits for a lock
// hold took; it returns write's error. The session is looked for from a
// connection of its own, since a transaction sees pg_stat_activity as it
// was when it first looked.
func endSessionWhileItWaits(t *testing.T, conn *pgx.Conn, hold string, write func() error) error {
	t.Helper()
	watcher, err := pgx.Connect(t.Context(), conn.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watcher.Close(context.Background()) }()
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(t.Context(), hold); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- write() }()
	for deadline := time.Now().Add(time.Minute); ; {
		var ended bool
		err := watcher.QueryRow(t.Context(), `SELECT coalesce(bool_and(pg_terminate_backend(pid, 60000)), false)
			FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid))`, conn.PgConn().PID()).Scan(&ended)
		if err != nil {
			t.Fatal(err)
		}
		if ended {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the write never waited for the lock held")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Minute):
		t.Fatal("the write has not returned 5 minutes after the server ended its session")
		return nil
	}
}
