// Package sqlite is a vector store in one SQLite file (modernc.org/sqlite,
// no cgo). The file is the truth; each handle keeps a search index of every
// collection in memory (package vecindex: contiguous float32, exact up to
// Config.IndexThreshold vectors, an HNSW graph above), loaded at open and
// kept in step with the file by a write counter, so writes through another
// handle or process are seen by the next search. The data stays on this
// host.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/internal/vecindex"
	"github.com/abi-engine/engine/adapters/secondary/vectorstore/internal/vecutil"
	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/ports"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Config is the block under services.vector_store.config.
type Config struct {
	// Path is the SQLite file; its directory is created when missing.
	Path string `yaml:"path"`
	// IndexThreshold is the number of vectors above which a collection is
	// searched through an approximate HNSW graph; 0 means
	// vecindex.DefaultThreshold (50,000), a negative value keeps every
	// search exact.
	IndexThreshold int `yaml:"index_threshold"`
	// Logger hears of what failed in the background, such as a panic
	// while an index loads or its graph is built; nil means
	// slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// LocalStorage implements ports.StorageConfig: the file stays on this host.
func (c Config) LocalStorage() string { return "SQLite at " + c.Path }

// SetLogger implements storage.LoggerSetter.
func (c *Config) SetLogger(log *slog.Logger) { c.Logger = log }

// Check refuses a path SQLite would misread, naming it under key: the
// driver takes what follows a "?" as its options. The registry calls it
// when the configuration is built, before anything opens.
func (c Config) Check(key string) error {
	if strings.Contains(c.Path, "?") {
		return fmt.Errorf("%s.path %q holds a \"?\", which SQLite would read as the start of options: %w", key, c.Path, ports.ErrInvalidArgument)
	}
	return nil
}

// Default puts an empty Path at vectors.sqlite under the data directory, written so
// it reads as the user wrote the directory ("./.engine/vectors.sqlite").
func (c *Config) Default(dataDir string) {
	if c.Path == "" {
		c.Path = strings.TrimRight(dataDir, "/") + "/vectors.sqlite"
	}
}

// Store is one handle on the file. Several handles, in one process or
// several, may share a file: writes take SQLite's write lock up front and
// wait for it, and check the file's fence there (sqlitedb.Fence), so once
// a newer serving term has written, a write of an older one is refused
// with ports.ErrFenced.
type Store struct {
	db        *sql.DB
	threshold int
	log       *slog.Logger
	fetch     *sql.Stmt
	fence     *sqlitedb.Fence
	// writes holds a token while a write of the handle runs. The writes
	// of a handle queue for it in the order they came, under their own
	// contexts, rather than each on a connection of its own at the file's
	// lock, whose busy handler serves no one in turn: it polls, up to
	// 100 ms apart, so a write that had waited longest lost the lock to
	// each newcomer, for as long as writes kept coming.
	writes chan struct{}

	mu      sync.Mutex
	indexes map[string]*cached
	upserts map[int]*sql.Stmt // by rows per statement
	// drops counts the indexes the handle let go of as their collections
	// went. A snapshot taken before one of them may still hold the
	// collection, and would load its index anew after the drop; sync
	// uses an entry only while the count stands where it was before the
	// entry was taken and the snapshot (errDropped otherwise).
	drops uint64
	// closed is set by Close: from then on no index is made or loaded, so
	// none outlives the handle with a graph builder nobody stops.
	closed bool

	// life ends as Close begins: with it end the load of the indexes at
	// open, every load or catch-up of an index a search began, and every
	// wait for one, so that Close does not wait for them.
	life        context.Context
	stop        context.CancelFunc
	loaded      chan struct{}  // closed when the load at open has ended
	loads       sync.WaitGroup // the loads of whole collections under way (startLoad)
	checkpoints *sqlitedb.Checkpointer

	hooks syncHooks
}

// syncHooks are points of sync where tests stop it; nil outside tests.
type syncHooks struct {
	read       func(name string)                      // sync has read the collection from its snapshot
	catchUp    func(ctx context.Context, name string) // a sync or a load holds the index and reads the collection into it, until ctx ends
	applying   func(name string)                      // a write of the handle holds the index's turn and goes on to give it its change
	wait       func(name string)                      // a call found the index's turn taken and waits for it
	writing    func()                                 // a write of the handle has come, and waits for its turn to write
	connecting func()                                 // a write of the handle has its turn, and goes on to take a connection
	connected  func(conn *sql.Conn)                   // a write of the handle has its turn and conn, and goes on to set conn's wait for the file's lock
	locking    func()                                 // a write of the handle has its turn, a connection and its wait, and goes on to take the file's lock
}

// cached is a handle's index of one collection and the point of the file's
// history it reflects: the collection's creation and last write, as values
// of the file's write counter.
type cached struct {
	// turn holds a token while a sync, or the load it hands the turn
	// to, brings the index up to date, holding mu for seconds as it
	// reads a whole collection or many writes. Whatever takes mu to
	// write takes the turn first, save Close: a search waits
	// for the turn, not for mu, so that it can leave as soon as it gives
	// up (take), and takes mu only once it has the turn, when mu is never
	// held for long; a write of the handle, or a drop, only tries it
	// (tryTurn), and leaves its change to the next search when the turn
	// is taken, rather than wait for a load. Looking for a sync under
	// way and taking the turn are one step, so no load begins between
	// the two.
	turn chan struct{}
	// mu is held to write while the index catches up with the file or
	// takes a write of the handle, and to read while a search walks it,
	// so the index a search walks stands where that search's snapshot
	// of the file does.
	mu      sync.RWMutex
	created int64
	version int64
	index   *vecindex.Index
	// shown is index, for what reads it without mu: a load holds mu for
	// as long as it reads the collection, and collections, which only
	// tells how much of the index is built, must not wait for that.
	shown atomic.Pointer[vecindex.Index]
	// gone is set once the handle has let go of the entry: whoever gives
	// back the turn then closes the index it leaves (giveBack), or leaves
	// that to whoever holds the turn by then.
	gone atomic.Bool
}

// set makes x the index; the caller holds mu to write.
func (c *cached) set(x *vecindex.Index) {
	c.index = x
	c.shown.Store(x)
}

// tryTurn takes c's turn if nobody holds it, at once, and reports whether
// it did.
func (c *cached) tryTurn() bool {
	select {
	case c.turn <- struct{}{}:
		return true
	default:
		return false
	}
}

// giveBack gives back c's turn, taken to write, and closes the index of
// an entry the handle has let go of.
func (c *cached) giveBack() {
	<-c.turn
	if c.gone.Load() {
		c.closeIfFree()
	}
}

// closeIfFree closes and drops the index of an entry the handle has let
// go of, when nobody holds its turn; whoever holds it closes the index as
// it gives the turn back.
func (c *cached) closeIfFree() {
	if !c.tryTurn() {
		return
	}
	c.mu.Lock()
	if c.index != nil {
		c.discard()
	}
	c.mu.Unlock()
	<-c.turn
}

var _ ports.VectorStore = (*Store)(nil)

const schema = `
CREATE TABLE IF NOT EXISTS vector_collections (
	name      TEXT PRIMARY KEY,
	dimension INTEGER NOT NULL,
	metric    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS vectors (
	collection TEXT NOT NULL,
	id         TEXT NOT NULL,
	vec        BLOB NOT NULL,
	payload    TEXT,
	PRIMARY KEY (collection, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vector_clock (
	id  INTEGER PRIMARY KEY CHECK (id = 1),
	seq INTEGER NOT NULL
);
INSERT OR IGNORE INTO vector_clock (id, seq) VALUES (1, 0);
CREATE TABLE IF NOT EXISTS vector_deleted (
	collection TEXT NOT NULL,
	id         TEXT NOT NULL,
	version    INTEGER NOT NULL,
	PRIMARY KEY (collection, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS vector_deleted_by_version ON vector_deleted (collection, version);
` + sqlitedb.FenceSchema

// The write counter's columns, added to files made before them. Every write
// takes the next value of vector_clock.seq: a collection records it when it
// is created (created) and at each write (version), a row when it is
// written, a deleted id in vector_deleted. A handle whose index is at
// version v catches up by reading what is newer than v.
var columns = []struct{ table, column string }{
	{"vector_collections", "created"},
	{"vector_collections", "version"},
	{"vector_collections", "pruned"},
	{"vectors", "version"},
}

const indexes = `CREATE INDEX IF NOT EXISTS vectors_by_version ON vectors (collection, version);`

// keepDeleted is how many writes back the ids of deleted vectors are kept;
// a handle further behind than that reloads the collection.
const keepDeleted = 10_000

// Open opens or creates the file and its tables.
func Open(ctx context.Context, c Config) (*Store, error) { return open(ctx, c, syncHooks{}) }

// open is Open with the hooks in place before the indexes start to load.
func open(ctx context.Context, c Config, hooks syncHooks) (*Store, error) {
	if c.Path == "" {
		return nil, fmt.Errorf("vector_store sqlite: path is empty: %w", ports.ErrInvalidArgument)
	}
	// The driver reads its options after the first "?", so a path holding
	// one would be cut short.
	if strings.ContainsRune(c.Path, '?') {
		return nil, fmt.Errorf("vector_store sqlite: path %q contains '?': %w", c.Path, ports.ErrInvalidArgument)
	}
	if err := os.MkdirAll(filepath.Dir(c.Path), 0o750); err != nil {
		return nil, fmt.Errorf("vector_store sqlite: path %q: %w", c.Path, err)
	}
	// WAL lets readers run beside a writer; _txlock=immediate takes the
	// write lock when a transaction begins, so two handles never deadlock
	// upgrading a read lock, and busy_timeout makes them wait for it. The
	// log is copied into the database in the background
	// (sqlitedb.Checkpointer), not by the upsert that fills it.
	dsn := fmt.Sprintf("%s?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=wal_autocheckpoint(%d)&_txlock=immediate",
		c.Path, sqlitedb.FallbackPages)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("vector_store sqlite: open %q: %w", c.Path, err)
	}
	// A file of another account is refused before its tables are touched.
	if err := sqlitedb.Belong(ctx, db, "vector_store sqlite", c.Path); err != nil {
		db.Close()
		return nil, err
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Store{db: db, threshold: c.IndexThreshold, log: log, indexes: map[string]*cached{}, upserts: map[int]*sql.Stmt{}, writes: make(chan struct{}, 1), hooks: hooks}
	if err := s.prepare(ctx, c.Path); err != nil {
		db.Close()
		return nil, fmt.Errorf("vector_store sqlite: %q: %w", c.Path, err)
	}
	if s.checkpoints, err = sqlitedb.StartCheckpointer(c.Path, sqlitedb.CheckpointEvery, s.log); err != nil {
		db.Close()
		return nil, fmt.Errorf("vector_store sqlite: %w", err)
	}
	// The indexes load in the background, so a large file does not hold
	// up the engine's start (or a handover); a search of a collection
	// still loading waits for it, and one whose load failed tries again.
	// The load runs on a goroutine of its own, where a panic would end the
	// process, which may hold the lease: it is logged, and what it left
	// is for the searches to load, as after a failure.
	s.life, s.stop = context.WithCancel(context.Background())
	s.loaded = make(chan struct{})
	go func() {
		defer close(s.loaded)
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("the load of the vector indexes panicked; searches load the collections it left",
					"path", c.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			}
		}()
		s.loadAll(s.life)
	}()
	return s, nil
}

// indexOptions are the options of a collection's index.
func (s *Store) indexOptions() vecindex.Options {
	return vecindex.Options{Threshold: s.threshold, Logger: s.log}
}

// prepare makes or updates the tables, in one write transaction so two
// handles opening an older file do not both add a column.
func (s *Store) prepare(ctx context.Context, path string) error {
	err := s.transact(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, schema); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
		for _, c := range columns {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?`, c.table, c.column).Scan(&n); err != nil {
				return fmt.Errorf("read the columns of %s: %w", c.table, err)
			}
			if n == 0 {
				if _, err := tx.ExecContext(ctx, `ALTER TABLE `+c.table+` ADD COLUMN `+c.column+` INTEGER NOT NULL DEFAULT 0`); err != nil {
					return fmt.Errorf("add column %s.%s: %w", c.table, c.column, err)
				}
			}
		}
		if _, err := tx.ExecContext(ctx, indexes); err != nil {
			return fmt.Errorf("create indexes: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.fetch, err = s.db.PrepareContext(ctx, `SELECT vec, payload FROM vectors WHERE collection = ? AND id = ?`)
	if err != nil {
		return fmt.Errorf("prepare the row fetch: %w", err)
	}
	s.fence, err = sqlitedb.NewFence(ctx, s.db, "vector_store", path)
	return err
}

// loadAll builds the index of every collection, so the first search does
// not pay for it. What fails here is left for the search to meet.
func (s *Store) loadAll(ctx context.Context) {
	cs, err := s.Collections(ctx)
	if err != nil {
		return
	}
	for _, c := range cs {
		if ctx.Err() != nil {
			return
		}
		// errAhead too: the index is already loaded; errDropped: the
		// collection is gone.
		loaded, _ := s.inSync(ctx, c.Name, false, func(_ *sql.Tx, v view) error {
			v.c.unread()
			return nil
		})
		if loaded != nil {
			_ = s.await(ctx, c.Name, loaded)
		}
	}
}

// Close stops the indexes' graph builders and closes the handle's
// connections. It cuts short the loads and catch-ups of indexes under way,
// the load at open's and the searches' alike, rather than wait for them,
// and the searches waiting for one fail.
func (s *Store) Close() error {
	s.stop()
	<-s.loaded
	s.mu.Lock()
	s.closed = true
	held := s.indexes
	s.indexes = map[string]*cached{}
	for _, stmt := range s.upserts {
		stmt.Close()
	}
	s.upserts = map[int]*sql.Stmt{}
	s.mu.Unlock()
	// The loads under way, their reads cut short by stop, close what they
	// leave of an entry the handle let go of; from now on none starts.
	s.loads.Wait()
	// Under each entry's lock: a search that catches an index up holds
	// it, and one that takes it after this meets closed.
	for _, c := range held {
		c.mu.Lock()
		if c.index != nil {
			c.index.Close()
		}
		c.mu.Unlock()
	}
	if s.fetch != nil {
		s.fetch.Close()
	}
	return errors.Join(s.checkpoints.Close(), s.db.Close())
}

// readTx runs f in a read transaction: one snapshot of the file, taken
// without the write lock. What f read stands whether or not the rollback
// that ends the transaction succeeds, but a connection whose rollback
// failed is closed (sqlitedb.Drop): back in the pool it would stay in the
// snapshot, where the next write could not begin, the next read would
// answer from the file as it stood then, and the log could not be
// checkpointed past it.
func (s *Store) readTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("take a connection: %w", err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// Deferred, so a panic in f (recovered by a load) ends the
	// transaction too, before conn goes back.
	defer func() {
		if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			sqlitedb.Drop(conn)
		}
	}()
	return f(tx)
}

// tick takes the next value of the write counter for a write to collection
// name and returns it with the collection's previous version.
func tick(ctx context.Context, tx *sql.Tx, name string) (seq, prev int64, err error) {
	if err := tx.QueryRowContext(ctx, `UPDATE vector_clock SET seq = seq + 1 WHERE id = 1 RETURNING seq`).Scan(&seq); err != nil {
		return 0, 0, fmt.Errorf("advance the write counter: %w", err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT version FROM vector_collections WHERE name = ?`, name).Scan(&prev); err != nil {
		return 0, 0, fmt.Errorf("read the version of %q: %w", name, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE vector_collections SET version = ? WHERE name = ?`, seq, name); err != nil {
		return 0, 0, fmt.Errorf("record the version of %q: %w", name, err)
	}
	return seq, prev, nil
}

// isClosed reports whether Close has begun.
func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// take waits for c's turn (see cached.turn), or for ctx to end, or the
// handle to close (errClosed): a search whose caller gave up leaves at
// once rather than wait for a load of the collection that may take
// seconds. The caller gives the turn back (giveBack).
func (s *Store) take(ctx context.Context, name string, c *cached) error {
	if c.tryTurn() {
		return nil
	}
	if s.hooks.wait != nil {
		s.hooks.wait(name)
	}
	select {
	case c.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.life.Done():
		return errClosed
	}
}

// dropCount is the number of indexes the handle has let go of so far; read
// it before a snapshot is taken, for sync.
func (s *Store) dropCount() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drops
}

// entrySince gets or makes the cache entry of collection name for a
// sync, once the handle had let go of drops indexes: errDropped when it
// has let go of more since, errClosed once it is closed.
func (s *Store) entrySince(name string, drops uint64) (*cached, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.sinceLocked(drops); err != nil {
		return nil, err
	}
	c, ok := s.indexes[name]
	if !ok {
		c = &cached{turn: make(chan struct{}, 1)}
		s.indexes[name] = c
	}
	return c, nil
}

// since is errDropped when the handle has let go of more than drops
// indexes, errClosed once it is closed: an entry taken then may no longer
// be the collection's.
func (s *Store) since(drops uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sinceLocked(drops)
}

func (s *Store) sinceLocked(drops uint64) error {
	switch {
	case s.closed:
		return errClosed
	case s.drops != drops:
		return errDropped
	}
	return nil
}

// errClosed is the answer of a call that meets the handle closed.
var errClosed = errors.New("vector_store sqlite: the handle is closed")

// errBusy is sync's answer when another call holds the index's turn: the
// caller waits for it outside the snapshot of tx.
var errBusy = errors.New("the index's turn is taken")

// errAhead is sync's answer when the handle's index already holds writes
// newer than the snapshot of tx: a snapshot taken now sees them.
var errAhead = errors.New("the index is ahead of the snapshot")

// errDropped is sync's answer when the handle has let go of an index since
// the snapshot of tx was taken: the snapshot may hold a collection that is
// gone, whose index a load from it would bring back. A snapshot taken now
// does not.
var errDropped = errors.New("a collection went since the snapshot")

// errLoadPanicked is sync's answer when reading the collection into its
// index panicked; the search that met it fails, and the next one loads the
// index anew.
var errLoadPanicked = errors.New("the index panicked as it took the rows")

// inSync brings the handle's index of collection name up to a snapshot of
// the file (sync) and runs use with the snapshot's transaction and the
// index, read-locked: use lets go of it (v.c.unread) once it has walked
// it. It waits inside no snapshot: when the index's turn is taken it
// gives its snapshot up, waits for the turn to be free, and takes a new
// snapshot; and it gives the snapshot up rather than wait inside it for
// a load it begins: loaded is where that load answers, for the caller to
// wait for (await) and try again. A snapshot held while a load reads for
// seconds would keep the checkpoint from copying what was written since,
// and searches waiting one after another would keep the log from ever
// being reset.
func (s *Store) inSync(ctx context.Context, name string, again bool, use func(tx *sql.Tx, v view) error) (loaded <-chan error, err error) {
	drops := s.dropCount()
	c, err := s.entrySince(name, drops)
	if err != nil {
		return nil, err
	}
	for {
		busy := false
		err = s.readTx(ctx, func(tx *sql.Tx) error {
			v, ld, err := s.sync(ctx, tx, name, c, drops, again)
			switch {
			case errors.Is(err, errBusy):
				busy = true
				return nil
			case ld != nil || err != nil:
				loaded = ld
				return err
			}
			return use(tx, v)
		})
		if !busy {
			return loaded, err
		}
		// The turn is given back at once: a turn held across the
		// next snapshot's reads would make every search that meets it
		// wait that long too.
		if err := s.take(ctx, name, c); err != nil {
			return nil, fmt.Errorf("wait for the index of %q: %w", name, err)
		}
		c.giveBack()
	}
}

// await waits for a load that inSync began, or for ctx to end, or the
// handle to close. The load goes on whether or not its search waits for
// it: one that gives up leaves it to the next, which finds the index up
// to date, or waits for the rest, rather than start it all over.
func (s *Store) await(ctx context.Context, name string, loaded <-chan error) error {
	select {
	case err := <-loaded:
		return err
	case <-ctx.Done():
		return fmt.Errorf("wait for the load of %q: %w", name, ctx.Err())
	case <-s.life.Done():
		return errClosed
	}
}

// sync brings c, the handle's index of collection name, up to the
// snapshot of tx, or past it, and returns it read-locked: an index behind
// the snapshot is brought up to the file on a goroutine of its own (load),
// and one that holds writes newer than the snapshot (the handle's own,
// applied once committed, or read by a load) is errAhead. sync takes c's
// turn once it has read the collection's row, and is errBusy, taking
// nothing, when another holds it; it gives the turn back, or hands it to
// the load it begins (loaded).
// drops is dropCount as it stood before c was taken and the snapshot of
// tx.
//
// again says the search tries again after its index went ahead of an
// earlier snapshot, or after a load: an index that is only behind by
// writes is then caught up in the search's own snapshot, since a load,
// reading from a newer one, would leave it ahead once more for as long
// as another handle goes on writing.
func (s *Store) sync(ctx context.Context, tx *sql.Tx, name string, c *cached, drops uint64, again bool) (view, <-chan error, error) {
	var at snapshot
	err := tx.QueryRowContext(ctx, `SELECT dimension, metric, created, version, pruned FROM vector_collections WHERE name = ?`, name).
		Scan(&at.dim, &at.metric, &at.created, &at.version, &at.pruned)
	if errors.Is(err, sql.ErrNoRows) {
		s.forgetMissing(name, c)
		c.closeIfFree()
		return view{}, nil, fmt.Errorf("collection %q: %w", name, ports.ErrNotFound)
	}
	if err != nil {
		return view{}, nil, fmt.Errorf("read collection %q: %w", name, err)
	}
	if s.hooks.read != nil {
		s.hooks.read(name)
	}
	if !c.tryTurn() {
		return view{}, nil, errBusy
	}
	if err := s.since(drops); err != nil {
		c.giveBack()
		return view{}, nil, err
	}
	return s.syncTurn(ctx, tx, name, c, at, again)
}

// snapshot is a collection's row as a snapshot of the file holds it.
type snapshot struct {
	dim                      int
	metric                   string
	created, version, pruned int64
}

// syncTurn is sync once it has read the collection's row: it gives back
// c's turn, or hands it to the load that it starts (loaded is where that
// load answers), and returns the index read-locked.
func (s *Store) syncTurn(ctx context.Context, tx *sql.Tx, name string, c *cached, at snapshot, again bool) (v view, loaded <-chan error, err error) {
	c.mu.Lock()
	defer func() {
		c.mu.Unlock()
		switch {
		case loaded != nil:
		case err == nil:
			// Nothing writes to the index between the two locks: that
			// takes the turn, still held here. unread closes the index
			// of an entry the handle lets go of meanwhile.
			c.mu.RLock()
			<-c.turn
		default:
			c.giveBack()
		}
	}()
	if s.isClosed() {
		// Close has closed this entry's index, or passes it once this
		// sync lets go: an index made now would outlive the handle.
		return view{}, nil, errClosed
	}
	switch {
	case c.index != nil && c.created > at.created:
		// The index is of a collection made after the snapshot's, by
		// the handle or loaded from a newer snapshot.
		return view{}, nil, errAhead
	case c.index == nil || c.created < at.created || c.version < at.pruned || (c.version < at.version && !again):
		if loaded = s.startLoad(c, name); loaded == nil {
			return view{}, nil, errClosed
		}
		return view{}, loaded, nil
	case c.version < at.version:
		// What this catch-up reads ends with the handle too, so Close,
		// which waits for mu, does not wait for it.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(s.life, cancel)()
		if err := s.catchUpOrDrop(ctx, tx, name, at.dim, c); err != nil {
			return view{}, nil, err
		}
	}
	if c.version > at.version {
		return view{}, nil, errAhead
	}
	c.version = at.version
	return view{c: c, index: c.index, dim: at.dim, metric: ports.Metric(at.metric)}, nil, nil
}

// catchUpOrDrop catches c's index up from c.version to the snapshot of tx;
// the caller holds c.mu. A catch-up that fails (its search gave up, say)
// has changed nothing: the index stays at c.version, graph and all. One
// that panics may have left it part changed: it goes, and the next search
// loads the collection anew.
func (s *Store) catchUpOrDrop(ctx context.Context, tx *sql.Tx, name string, dim int, c *cached) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = s.loadPanicked(c, name, p)
		}
	}()
	return s.catchUp(ctx, tx, name, dim, c, c.version)
}

// loadPanicked logs a panic p while collection name was read into c's
// index, drops the index, and is the error of the read; the caller holds
// c.mu.
func (s *Store) loadPanicked(c *cached, name string, p any) error {
	s.log.Error("reading a collection into its vector index panicked; the index is dropped",
		"collection", name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	if c.index != nil {
		c.discard()
	}
	return fmt.Errorf("read collection %q into its index: %v: %w", name, p, errLoadPanicked)
}

// startLoad starts a load of collection name into c, on a goroutine of
// its own, to which the caller, holding c's turn, hands it; nil once the
// handle is closed. The goroutine answers on the channel it returns.
func (s *Store) startLoad(c *cached, name string) <-chan error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.loads.Add(1)
	loaded := make(chan error, 1)
	go func() {
		defer s.loads.Done()
		loaded <- s.load(c, name)
	}()
	return loaded
}

// load brings c's index of collection name up to a snapshot of its own,
// taken once it holds c.mu, so no write of the handle that the index holds
// is newer than it: a collection made anew, or an index further behind
// than the deleted ids are kept, is read whole into a new index;
// otherwise only what was written since is read. A catch-up that fails
// has changed nothing: the index stays where it stood, graph and all,
// for the next load to catch up from. load holds c's turn, which it gives
// back as it ends, and ends with
// the handle (life). It runs on a goroutine of its own, where a panic (a
// bug, or values that break the index's code) would end the process,
// which may hold the lease: the index it may have left part changed is
// dropped, and the next search loads the collection anew.
func (s *Store) load(c *cached, name string) (err error) {
	c.mu.Lock()
	defer func() {
		if p := recover(); p != nil {
			err = s.loadPanicked(c, name, p)
		}
		c.mu.Unlock()
		c.giveBack()
	}()
	if s.isClosed() {
		return errClosed
	}
	return s.readTx(s.life, func(tx *sql.Tx) error {
		var at snapshot
		err := tx.QueryRowContext(s.life, `SELECT dimension, metric, created, version, pruned FROM vector_collections WHERE name = ?`, name).
			Scan(&at.dim, &at.metric, &at.created, &at.version, &at.pruned)
		if errors.Is(err, sql.ErrNoRows) {
			// Gone from the file: what the index held is of no use.
			if c.index != nil {
				c.discard()
			}
			return fmt.Errorf("collection %q: %w", name, ports.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("read collection %q: %w", name, err)
		}
		switch {
		case c.index == nil || c.created != at.created || c.version < at.pruned:
			if c.index != nil {
				c.index.Close()
			}
			c.set(vecindex.New(at.dim, ports.Metric(at.metric), s.indexOptions()))
			c.created, c.version = at.created, 0
			if err := s.catchUp(s.life, tx, name, at.dim, c, -1); err != nil {
				c.discard()
				return err
			}
		case c.version < at.version:
			if err := s.catchUp(s.life, tx, name, at.dim, c, c.version); err != nil {
				return err
			}
		}
		c.version = at.version
		return nil
	})
}

// discard drops the index when it failed to catch up, for the next search to
// load anew; the caller holds c.mu. The index is closed first: once past
// the threshold it has a graph builder, which would otherwise go on
// building a graph nobody holds, after the handle's Close too.
func (c *cached) discard() {
	c.index.Close()
	c.set(nil)
}

// view is a collection's settings and its index as they stand at a
// snapshot of the file.
type view struct {
	c      *cached
	index  *vecindex.Index
	dim    int
	metric ports.Metric
}

// unread lets go of mu, read-locked by sync, and closes the index of an
// entry the handle let go of meanwhile, which could not be closed while
// sync had the turn.
func (c *cached) unread() {
	c.mu.RUnlock()
	if c.gone.Load() {
		c.closeIfFree()
	}
}

// catchUp reads the rows written and the ids deleted after version since
// into c's index, or, when since is negative, every row of the collection
// into the index of a load. A whole load goes into the index as it is read;
// a catch-up first reads everything it will apply, so that one that fails
// midway leaves the index as it stood, at since, rather than holding some
// writes newer than its version, which a search of an older snapshot would
// meet.
func (s *Store) catchUp(ctx context.Context, tx *sql.Tx, name string, dim int, c *cached, since int64) error {
	if s.hooks.catchUp != nil {
		s.hooks.catchUp(ctx, name)
	}
	if since < 0 {
		return readRows(ctx, tx, name, dim, since, c.index.Put)
	}
	rows, err := tx.QueryContext(ctx, `SELECT id FROM vector_deleted WHERE collection = ? AND version > ?`, name, since)
	if err != nil {
		return fmt.Errorf("read the deletes of %q: %w", name, err)
	}
	var gone []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("read the deletes of %q: %w", name, err)
		}
		gone = append(gone, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the deletes of %q: %w", name, err)
	}
	var written []vecindex.Entry
	if err := readRows(ctx, tx, name, dim, since, func(b []vecindex.Entry) { written = append(written, b...) }); err != nil {
		return err
	}
	// An id deleted and written again since is among the rows written,
	// which put it back.
	c.index.Remove(gone)
	c.index.Put(written)
	return nil
}

// readRows reads the collection's rows written after version since (all
// of them when since is negative) and hands them to put a batch at a time;
// put must not keep the batch.
func readRows(ctx context.Context, tx *sql.Tx, name string, dim int, since int64, put func([]vecindex.Entry)) error {
	// A whole load walks the table by its key rather than by version.
	q, args := `SELECT id, vec, payload FROM vectors WHERE collection = ?`, []any{name}
	if since >= 0 {
		q, args = q+` AND version > ?`, append(args, since)
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("read the vectors of %q: %w", name, err)
	}
	defer rows.Close()
	batch := make([]vecindex.Entry, 0, 1024)
	for rows.Next() {
		var id string
		var blob []byte
		var payload sql.NullString
		if err := rows.Scan(&id, &blob, &payload); err != nil {
			return fmt.Errorf("read the vectors of %q: %w", name, err)
		}
		values := make([]float32, dim)
		if err := decodeInto(values, blob); err != nil {
			return fmt.Errorf("read vector %q of %q: %w", id, name, err)
		}
		p, err := decodePayload(payload)
		if err != nil {
			return fmt.Errorf("read vector %q of %q: %w", id, name, err)
		}
		if batch = append(batch, vecindex.Entry{ID: id, Values: values, Payload: p}); len(batch) == cap(batch) {
			put(batch)
			batch = batch[:0]
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the vectors of %q: %w", name, err)
	}
	put(batch)
	return nil
}

// indexed is how many vectors of collection name this handle's graph
// holds, without waiting for a load of the collection under way.
func (s *Store) indexed(name string) int {
	s.mu.Lock()
	c, ok := s.indexes[name]
	s.mu.Unlock()
	if !ok {
		return 0
	}
	x := c.shown.Load()
	if x == nil {
		return 0
	}
	return x.Indexed()
}

// forget drops the index of a collection that is gone. dropped says the
// handle dropped the collection itself, which counts as letting go of an
// index even when it held none: a search whose snapshot is older may be
// about to load one.
func (s *Store) forget(name string, dropped bool) {
	s.mu.Lock()
	c, ok := s.indexes[name]
	delete(s.indexes, name)
	if ok || dropped {
		s.drops++
	}
	s.mu.Unlock()
	if ok {
		s.letGo(c)
	}
}

// forgetMissing lets go of c, the entry of collection name, which the
// caller's snapshot does not hold, if the handle still holds it; the
// caller closes its index (giveBack, or closeIfFree).
// Only an entry that held an index counts as a drop: a search of a name
// that is no collection makes an entry to wait for its turn on, and its
// going must not send every other search under way to try again.
func (s *Store) forgetMissing(name string, c *cached) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.indexes[name] != c {
		return
	}
	delete(s.indexes, name)
	if c.shown.Load() != nil {
		s.drops++
	}
	c.gone.Store(true)
}

// letGo closes the index of an entry the handle has let go of. A sync
// under way (the load of the collection, which may take seconds) closes
// it as it gives back the turn; the caller does not wait for it.
func (s *Store) letGo(c *cached) {
	c.gone.Store(true)
	c.closeIfFree()
}

// applied tells the handle's index of a write it made as version seq over
// version prev: when the index stood at prev it takes the write directly,
// otherwise the next search catches up from the file. So does the next
// search when the index's turn is taken, by a sync under way or about to
// begin: the write, committed, does not wait for it, which for the load
// of a large collection would be seconds.
func (s *Store) applied(name string, prev, seq int64, f func(*vecindex.Index)) {
	s.mu.Lock()
	c, ok := s.indexes[name]
	s.mu.Unlock()
	if !ok || !c.tryTurn() {
		return
	}
	defer c.giveBack()
	if s.hooks.applying != nil {
		s.hooks.applying(name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.index != nil && c.version == prev {
		f(c.index)
		c.version = seq
	}
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// collection reads a collection's settings, or ErrNotFound.
func collection(ctx context.Context, q querier, name string) (int, ports.Metric, error) {
	var dim int
	var metric string
	err := q.QueryRowContext(ctx, `SELECT dimension, metric FROM vector_collections WHERE name = ?`, name).Scan(&dim, &metric)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", fmt.Errorf("collection %q: %w", name, ports.ErrNotFound)
	}
	if err != nil {
		return 0, "", fmt.Errorf("read collection %q: %w", name, err)
	}
	return dim, ports.Metric(metric), nil
}

// inTx runs a write of a call in a transaction that holds the write lock
// from its start, begun by the fence once it has passed ctx's term. A
// write SQLite has no room for (SQLITE_FULL: the disk, or a page limit) is
// ports.ErrStorageFull; SQLite rolled it back, so nothing was written. A
// write refused for the lock before its COMMIT (another engine on this
// host held it until the write's wait ended) is ports.ErrNotDone
// (sqlitedb.NotDone). That wait is made of tries: the connection's busy
// timeout is set to one (sqlitedb.Wait.Try) for the write, and set back
// before the connection goes back to the pool, and a BEGIN refused for the
// lock is tried again while the clock allows, until BusyTimeout has passed
// or ctx's deadline or the moment the call's answer is due, if sooner
// (sqlitedb.WaitFor), so that a caller still waiting learns the write was
// not done. A write that failed before the transaction began, taking the
// connection or setting its wait, ran none of its statements:
// ports.ErrNotDone too. The writes
// of the handle run one at a time, in the order they came (Store.writes),
// so only writes of other handles wait for the file's lock beside it.
func (s *Store) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	if s.hooks.writing != nil {
		s.hooks.writing()
	}
	if err := sqlitedb.TakeTurn(ctx, s.writes); err != nil {
		return err
	}
	defer func() { <-s.writes }()
	if s.hooks.connecting != nil {
		s.hooks.connecting()
	}
	// Until the fence begins the transaction, the write has run none of
	// its statements: a failure here leaves it not done.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("take a connection: %w: %w", ports.ErrNotDone, err)
	}
	defer conn.Close()
	if s.hooks.connected != nil {
		s.hooks.connected(conn)
	}
	wait := sqlitedb.WaitFor(ctx)
	if err := busyTimeout(ctx, conn, wait.Try()); err != nil {
		// A PRAGMA sets the wait as it is prepared, so one that
		// failed may have set it all the same: the connection, kept,
		// might make the reads and writes it serves next give up early.
		sqlitedb.Drop(conn)
		return fmt.Errorf("%w: %w", ports.ErrNotDone, err)
	}
	defer func() {
		if err := busyTimeout(context.WithoutCancel(ctx), conn, sqlitedb.BusyTimeout); err != nil {
			// Kept, the connection would make the reads and writes it
			// serves next give up early; it is dropped instead.
			sqlitedb.Drop(conn)
		}
	}()
	if s.hooks.locking != nil {
		s.hooks.locking()
	}
	tx, err := s.fence.Begin(ctx, conn, wait)
	if err != nil {
		return sqlitedb.NotDone(sqlitedb.Full(err))
	}
	return sqlitedb.Full(finish(ctx, conn, tx, f))
}

// busyTimeout sets how long conn waits for the file's lock.
func busyTimeout(ctx context.Context, conn *sql.Conn, wait time.Duration) error {
	if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.FormatInt(wait.Milliseconds(), 10)); err != nil {
		return fmt.Errorf("set the wait for the lock to %v: %w", wait, err)
	}
	return nil
}

// transact runs f in a transaction that holds the write lock from its
// start; the schema's own, at open, before the fence exists.
func (s *Store) transact(ctx context.Context, f func(tx *sql.Tx) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("take a connection: %w", err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	return finish(ctx, conn, tx, f)
}

// finish runs f in tx, begun on conn, and commits, or rolls back when f
// fails, closing conn if that fails (sqlitedb.RollBack) or if a failed
// COMMIT left the transaction open (sqlitedb.Commit).
func finish(ctx context.Context, conn *sql.Conn, tx *sql.Tx, f func(tx *sql.Tx) error) error {
	if err := f(tx); err != nil {
		return sqlitedb.RollBack(conn, tx, err)
	}
	if err := sqlitedb.Commit(ctx, conn, tx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (s *Store) CreateCollection(ctx context.Context, name string, dimension int, metric ports.Metric) error {
	if err := vecutil.CheckCollection(name, dimension, metric); err != nil {
		return err
	}
	var seq int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		dim, m, err := collection(ctx, tx, name)
		switch {
		case err == nil && (dim != dimension || m != metric):
			return fmt.Errorf("collection %q exists with dimension %d and metric %s, not %d and %s: %w",
				name, dim, m, dimension, metric, ports.ErrConflict)
		case err == nil:
			return nil
		case !errors.Is(err, ports.ErrNotFound):
			return err
		}
		if err := tx.QueryRowContext(ctx, `UPDATE vector_clock SET seq = seq + 1 WHERE id = 1 RETURNING seq`).Scan(&seq); err != nil {
			return fmt.Errorf("create collection %q: advance the write counter: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO vector_collections (name, dimension, metric, created, version) VALUES (?, ?, ?, ?, ?)`,
			name, dimension, string(metric), seq, seq); err != nil {
			return fmt.Errorf("create collection %q: %w", name, err)
		}
		return nil
	})
	if err != nil || seq == 0 {
		return err
	}
	// The handle indexes the new collection from the start, so its own
	// upserts go into the index as they are written. The index goes into
	// an entry of its own: the handle may still hold one of a collection
	// of the same name that another handle dropped, whose load, under
	// way, the create does not wait for.
	c := &cached{turn: make(chan struct{}, 1)}
	c.set(vecindex.New(dimension, metric, s.indexOptions()))
	c.created, c.version = seq, seq
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.index.Close()
		return nil // the collection is in the file, and no index outlives the handle
	}
	old, had := s.indexes[name]
	s.indexes[name] = c
	if had {
		s.drops++
	}
	s.mu.Unlock()
	if had {
		s.letGo(old)
	}
	return nil
}
func (s *Store) DeleteCollection(ctx context.Context, name string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM vector_collections WHERE name = ?`, name)
		if err != nil {
			return fmt.Errorf("delete collection %q: %w", name, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return fmt.Errorf("delete collection %q: %w", name, ports.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM vectors WHERE collection = ?`, name); err != nil {
			return fmt.Errorf("delete the vectors of %q: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM vector_deleted WHERE collection = ?`, name); err != nil {
			return fmt.Errorf("delete the deleted ids of %q: %w", name, err)
		}
		return nil
	})
	if err == nil {
		s.forget(name, true)
	}
	return err
}

func (s *Store) Collections(ctx context.Context) ([]ports.VectorCollection, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, dimension, metric FROM vector_collections ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list collections: %w", err)
	}
	defer rows.Close()
	out := []ports.VectorCollection{}
	for rows.Next() {
		var c ports.VectorCollection
		var metric string
		if err := rows.Scan(&c.Name, &c.Dimension, &metric); err != nil {
			return nil, fmt.Errorf("list collections: %w", err)
		}
		c.Metric = ports.Metric(metric)
		c.Indexed = s.indexed(c.Name)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list collections: %w", err)
	}
	return out, nil
}

func (s *Store) Upsert(ctx context.Context, name string, vectors []ports.Vector) error {
	type row struct {
		id      string
		vec     []byte
		payload sql.NullString
	}
	rows := make([]row, len(vectors))
	entries := make([]vecindex.Entry, len(vectors))
	for i, v := range vectors {
		rows[i] = row{id: v.ID, vec: encode(v.Values)}
		entries[i] = vecindex.Entry{ID: v.ID, Values: v.Values}
		if len(v.Payload) > 0 {
			p, err := vecutil.NormalizePayload(v.Payload)
			if err != nil {
				return fmt.Errorf("upsert %q into %q: %w", v.ID, name, err)
			}
			b, _ := json.Marshal(p) // a normalised payload always marshals
			rows[i].payload = sql.NullString{String: string(b), Valid: true}
			entries[i].Payload = p
		}
	}
	var seq, prev int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		dim, _, err := collection(ctx, tx, name)
		if err != nil {
			return err
		}
		if err := vecutil.CheckVectors(name, dim, vectors); err != nil {
			return err
		}
		if seq, prev, err = tick(ctx, tx, name); err != nil {
			return err
		}
		// Rows go upsertChunk to a statement, which spares most of the
		// per-statement cost of the driver; SQLite applies them in order,
		// so of two with the same id the later wins.
		for len(rows) > 0 {
			n := min(len(rows), upsertChunk)
			stmt, err := s.upsertStmt(ctx, tx, n)
			if err != nil {
				return fmt.Errorf("upsert into %q: %w", name, err)
			}
			args := make([]any, 0, 5*n)
			for _, r := range rows[:n] {
				args = append(args, name, r.id, r.vec, r.payload, seq)
			}
			if _, err := stmt.ExecContext(ctx, args...); err != nil {
				return fmt.Errorf("upsert %q to %q into %q: %w", rows[0].id, rows[n-1].id, name, err)
			}
			rows = rows[n:]
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.applied(name, prev, seq, func(x *vecindex.Index) { x.Put(entries) })
	return nil
}

// upsertChunk is how many rows one upsert statement writes.
const upsertChunk = 50

// upsertStmt is the statement that upserts n rows, prepared once per
// handle for a full chunk and for each shorter tail, and bound to tx.
func (s *Store) upsertStmt(ctx context.Context, tx *sql.Tx, n int) (*sql.Stmt, error) {
	s.mu.Lock()
	stmt, ok := s.upserts[n]
	s.mu.Unlock()
	if !ok {
		q := `INSERT INTO vectors (collection, id, vec, payload, version) VALUES (?, ?, ?, ?, ?)` +
			strings.Repeat(`, (?, ?, ?, ?, ?)`, n-1) +
			` ON CONFLICT (collection, id) DO UPDATE SET vec = excluded.vec, payload = excluded.payload, version = excluded.version`
		var err error
		if stmt, err = s.db.PrepareContext(ctx, q); err != nil {
			return nil, err
		}
		s.mu.Lock()
		if old, raced := s.upserts[n]; raced {
			stmt.Close()
			stmt = old
		} else {
			s.upserts[n] = stmt
		}
		s.mu.Unlock()
	}
	return tx.StmtContext(ctx, stmt), nil
}

// Search finds candidates in the handle's index, standing at the file's
// snapshot, and reads them from the same snapshot: results carry the
// stored values and payloads, and are scored exactly from them. An index
// already past the snapshot is searched with a newer one: its candidates
// read from the older rows would miss vectors of both. So is a snapshot
// taken before the handle dropped a collection, which may still hold it.
// A search waits for its turn at the index, and for a load of it, inside
// no snapshot (inSync).
func (s *Store) Search(ctx context.Context, name string, query []float32, k int, filter map[string]any) ([]ports.ScoredVector, error) {
	f, err := vecutil.NewFilter(filter)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", name, err)
	}
	for again := false; ; again = true {
		out, loaded, err := s.search(ctx, name, query, k, f, again)
		switch {
		case loaded != nil:
			if err := s.await(ctx, name, loaded); err != nil {
				return nil, err
			}
		case !errors.Is(err, errAhead) && !errors.Is(err, errDropped):
			return out, err
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("search %q: %w", name, err)
		}
	}
}

// search is one try of Search, in one snapshot; again as for sync, and
// loaded as for inSync.
func (s *Store) search(ctx context.Context, name string, query []float32, k int, f vecutil.Filter, again bool) ([]ports.ScoredVector, <-chan error, error) {
	var out []ports.ScoredVector
	loaded, err := s.inSync(ctx, name, again, func(tx *sql.Tx, v view) error {
		if err := vecutil.CheckSearch(name, v.dim, query, k); err != nil {
			v.c.unread()
			return err
		}
		cands := v.index.Search(query, k, f)
		v.c.unread()
		stmt := tx.StmtContext(ctx, s.fetch)
		defer stmt.Close()
		var fetchErr error
		out = vecindex.Finish(v.metric, query, k, cands, f, func(id string) (ports.Vector, bool) {
			var blob []byte
			var payload sql.NullString
			err := stmt.QueryRowContext(ctx, name, id).Scan(&blob, &payload)
			if errors.Is(err, sql.ErrNoRows) || fetchErr != nil {
				return ports.Vector{}, false
			}
			values := make([]float32, v.dim)
			if err == nil {
				err = decodeInto(values, blob)
			}
			p, perr := decodePayload(payload)
			if err = errors.Join(err, perr); err != nil {
				fetchErr = fmt.Errorf("search %q: read vector %q: %w", name, id, err)
				return ports.Vector{}, false
			}
			return ports.Vector{ID: id, Values: values, Payload: p}, true
		})
		return fetchErr
	})
	if err != nil || loaded != nil {
		return nil, loaded, err
	}
	return out, nil, nil
}

func (s *Store) Get(ctx context.Context, name, id string) (ports.Vector, error) {
	if err := vecutil.CheckID(name, id); err != nil {
		return ports.Vector{}, err
	}
	// The collection's dimension and the vector are read in one statement,
	// one snapshot of the file: read apart, a drop of the collection and
	// a create of it with another dimension could fall between the two,
	// and the vector's bytes be read against the wrong dimension.
	var dim int
	var found bool
	var blob []byte
	var payload sql.NullString
	err := s.db.QueryRowContext(ctx, `SELECT c.dimension, v.id IS NOT NULL, v.vec, v.payload
		FROM vector_collections c LEFT JOIN vectors v ON v.collection = c.name AND v.id = ?
		WHERE c.name = ?`, id, name).Scan(&dim, &found, &blob, &payload)
	if errors.Is(err, sql.ErrNoRows) {
		return ports.Vector{}, fmt.Errorf("collection %q: %w", name, ports.ErrNotFound)
	}
	if err != nil {
		return ports.Vector{}, fmt.Errorf("get %q from %q: %w", id, name, err)
	}
	if !found {
		return ports.Vector{}, fmt.Errorf("vector %q in %q: %w", id, name, ports.ErrNotFound)
	}
	values := make([]float32, dim)
	if err := decodeInto(values, blob); err != nil {
		return ports.Vector{}, fmt.Errorf("get %q from %q: %w", id, name, err)
	}
	p, err := decodePayload(payload)
	if err != nil {
		return ports.Vector{}, fmt.Errorf("get %q from %q: %w", id, name, err)
	}
	return ports.Vector{ID: id, Values: values, Payload: p}, nil
}

func (s *Store) Delete(ctx context.Context, name string, ids []string) error {
	var seq, prev int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if _, _, err := collection(ctx, tx, name); err != nil {
			return err
		}
		if err := vecutil.CheckIDs(name, ids); err != nil {
			return err
		}
		var err error
		if seq, prev, err = tick(ctx, tx, name); err != nil {
			return err
		}
		del, err := tx.PrepareContext(ctx, `DELETE FROM vectors WHERE collection = ? AND id = ?`)
		if err != nil {
			return fmt.Errorf("delete from %q: %w", name, err)
		}
		defer del.Close()
		mark, err := tx.PrepareContext(ctx, `INSERT INTO vector_deleted (collection, id, version) VALUES (?, ?, ?)
			ON CONFLICT (collection, id) DO UPDATE SET version = excluded.version`)
		if err != nil {
			return fmt.Errorf("delete from %q: %w", name, err)
		}
		defer mark.Close()
		for _, id := range ids {
			res, err := del.ExecContext(ctx, name, id)
			if err != nil {
				return fmt.Errorf("delete %q from %q: %w", id, name, err)
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				continue
			}
			if _, err := mark.ExecContext(ctx, name, id, seq); err != nil {
				return fmt.Errorf("record the delete of %q from %q: %w", id, name, err)
			}
		}
		// Deleted ids older than keepDeleted writes go; a handle that
		// still stands before them reloads the collection.
		if cut := seq - keepDeleted; cut > 0 {
			if _, err := tx.ExecContext(ctx, `DELETE FROM vector_deleted WHERE collection = ? AND version <= ?`, name, cut); err != nil {
				return fmt.Errorf("forget old deletes of %q: %w", name, err)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE vector_collections SET pruned = ? WHERE name = ? AND pruned < ?`, cut, name, cut); err != nil {
				return fmt.Errorf("forget old deletes of %q: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.applied(name, prev, seq, func(x *vecindex.Index) { x.Remove(ids) })
	return nil
}

func (s *Store) Count(ctx context.Context, name string) (int, error) {
	// The collection is found and its vectors counted in one statement,
	// one snapshot of the file: counted apart, a drop between the two
	// made the count of a collection that never stood empty 0.
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM vectors WHERE collection = c.name)
		FROM vector_collections c WHERE c.name = ?`, name).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("collection %q: %w", name, ports.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("count %q: %w", name, err)
	}
	return n, nil
}

// encode stores a vector as little-endian float32s.
func encode(values []float32) []byte {
	b := make([]byte, 4*len(values))
	for i, x := range values {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// decodeInto reads a stored vector into dst, which has the collection's
// dimension.
func decodeInto(dst []float32, b []byte) error {
	if len(b) != 4*len(dst) {
		return fmt.Errorf("stored vector has %d bytes, want %d", len(b), 4*len(dst))
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}

func decodePayload(p sql.NullString) (map[string]any, error) {
	if !p.Valid {
		return nil, nil
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(p.String), &out); err != nil {
		return nil, fmt.Errorf("stored payload: %w", err)
	}
	return out, nil
}
