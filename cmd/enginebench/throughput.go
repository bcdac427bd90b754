package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	kvpostgres "github.com/abi-engine/engine/adapters/secondary/keyvalue/postgres"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/ports"
)

// curveCallers are the points of the scaling curve; callers, the one the
// headline figures and ratios come from, is among them.
var curveCallers = []int{1, 8, callers, 256}

// value is the 16-byte value every get and set moves.
var value = []byte("0123456789abcdef")

// objectSize is the size of the object the transfers move.
const objectSize = 64 << 20

// The paths of the scaling curve, as the JSON and the chart name them.
const (
	pathRaw      = "raw_echo"
	pathNATSKV   = "nats_kv_get"
	pathMemory   = "kv_get_memory"
	pathSQLite   = "kv_get_sqlite"
	pathPostgres = "kv_get_postgres"
)

// Point is one load of the scaling curve.
type Point struct {
	Path    string  `json:"path"`
	Callers int     `json:"callers"`
	RPS     float64 `json:"rps"`
	P50US   float64 `json:"p50_us"`
	P99US   float64 `json:"p99_us"`
}

// stats is what one load measured.
type stats struct {
	rps      float64
	p50, p99 float64
}

// drive calls without pause from n goroutines for d and returns the
// answered calls per second and the latencies. call learns which caller
// it runs for, so that writers can keep to keys of their own.
func drive(ctx context.Context, n int, d time.Duration, call func(ctx context.Context, caller int) error) (stats, error) {
	var (
		mu       sync.Mutex
		all      []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for i := range n {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(end) && ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				t := time.Now()
				err := call(cctx, i)
				cancel()
				if err != nil {
					mu.Lock()
					firstErr = cmp(firstErr, err)
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if firstErr != nil {
		return stats{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return stats{}, err
	}
	st := stats{rps: round(float64(len(all)) / time.Since(start).Seconds())}
	st.p50, st.p99 = latencies(all)
	return st, nil
}

// answered checks that a call was answered with want: a load counts only
// right answers, so a path that answers fast with the wrong value (or
// none) fails the load instead of raising its figure.
func answered(what string, got, want []byte) error {
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s answered %q, want %q", what, got, want)
	}
	return nil
}

// cmp keeps the first error seen.
func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// curve drives call at every point of the scaling curve, records the
// points under path, and returns the figures at callers.
func (b *bench) curve(ctx context.Context, path string, call func(ctx context.Context, caller int) error) (stats, error) {
	var headline stats
	for _, n := range curveCallers {
		st, err := drive(ctx, n, b.duration, call)
		if err != nil {
			return stats{}, fmt.Errorf("%s with %d callers: %w", path, n, err)
		}
		b.result.Scaling = append(b.result.Scaling, Point{Path: path, Callers: n, RPS: st.rps, P50US: st.p50, P99US: st.p99})
		if n == callers {
			headline = st
		}
	}
	return headline, nil
}

// ratio is a/b to two decimals.
func ratio(a, b float64) *float64 {
	if b == 0 {
		return nil
	}
	return ptr(float64(int(a/b*100+0.5)) / 100)
}

// throughput measures every path on one broker, one after the other, the
// same 16-byte value on each: the raw echo (answered by a child process
// of this command), NATS's own key-value bucket, the engine's keyvalue on
// memory, on SQLite (with document and objects there too) and on
// PostgreSQL, and a direct pgx client on the same server.
func (b *bench) throughput(ctx context.Context) error {
	s, err := b.lab.broker()
	if err != nil {
		return err
	}
	url := s.ClientURL()
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	r := &b.result

	// The peers stay up to the end, to be driven in turns with the engine
	// (paired).
	stopEcho, err := b.startEcho(ctx, url)
	if err != nil {
		return fmt.Errorf("raw echo: %w", err)
	}
	defer stopEcho()
	raw, err := b.curve(ctx, pathRaw, rawCall(nc))
	if err != nil {
		return fmt.Errorf("raw echo: %w", err)
	}
	r.RawEchoRPS, r.RawEchoP50US, r.RawEchoP99US = ptr(raw.rps), ptr(raw.p50), ptr(raw.p99)

	peers, err := b.natsPeers(ctx, nc)
	if err != nil {
		return fmt.Errorf("nats key-value and object store: %w", err)
	}
	defer peers.close()

	memory, err := b.engineGets(ctx, engineConfig{url: url, lease: b.lease}, nc, pathMemory,
		func(ctx context.Context) (err error) {
			r.PairedKVToRaw, err = b.paired(ctx, engineGet(nc), rawCall(nc))
			return err
		})
	if err != nil {
		return fmt.Errorf("keyvalue on memory: %w", err)
	}
	r.KVGetRPS, r.KVGetRPSMemory = ptr(memory.rps), ptr(memory.rps)
	r.KVGetP50US, r.KVGetP99US = ptr(memory.p50), ptr(memory.p99)
	r.RatioKVToRaw = ratio(memory.rps, raw.rps)

	if err := b.sqliteEngine(ctx, url, nc, peers); err != nil {
		return fmt.Errorf("engine on SQLite: %w", err)
	}
	r.RatioSQLiteToRaw = ratio(deref(r.KVGetRPSSQLite), raw.rps)
	r.RatioSQLiteToNATSKV = ratio(deref(r.KVGetRPSSQLite), deref(r.NATSKVGetRPS))
	r.RatioSQLiteSetToNATSKVPut = ratio(deref(r.KVSetRPSSQLite), deref(r.NATSKVPutRPS))
	if err := b.embedded(ctx); err != nil {
		return fmt.Errorf("engine on embedded defaults: %w", err)
	}

	dsn := os.Getenv("ENGINE_TEST_PG_DSN")
	if dsn == "" {
		b.note("PostgreSQL figures absent: ENGINE_TEST_PG_DSN is not set")
		r.noPostgres = true
		return nil
	}
	if err := b.postgres(ctx, url, nc, dsn); err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	r.RatioPGToPGX = ratio(deref(r.KVGetRPSPostgres), deref(r.PGXGetRPS))
	r.RatioPGSetToPGXSet = ratio(deref(r.KVSetRPSPostgres), deref(r.PGXSetRPS))
	r.RatioFencedSet = ratio(deref(r.PGStoreSetFencedRPS), deref(r.PGStoreSetRPS))
	return nil
}

func deref(v *float64) float64 {
	if v == nil {
		return 0
	}
	return *v
}

// startEcho starts the floor, the raw echo: a queue subscriber in another
// process that answers at once, until stop.
func (b *bench) startEcho(ctx context.Context, url string) (stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	responder, err := b.lab.start(b.lab.dir, []string{echoEnv + "=" + url}, self)
	if err != nil {
		return nil, err
	}
	stop = func() { responder.stop(10 * time.Second) }
	if _, err := responder.waitLog(ctx, "ready", startTimeout); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// rawCall is one plain request to the raw echo.
func rawCall(nc *nats.Conn) func(ctx context.Context, _ int) error {
	body := []byte(`{"key":"bench"}`)
	return func(ctx context.Context, _ int) error {
		reply, err := nc.RequestWithContext(ctx, echoSubject, body)
		if err != nil {
			return err
		}
		return answered("the raw echo", reply.Data, body)
	}
}

// engineGet is one keyvalue get through the engine, of the key every
// engine scenario writes.
func engineGet(nc *nats.Conn) func(ctx context.Context, _ int) error {
	kv := natsclient.NewKeyValue(natsclient.New(nc))
	return func(ctx context.Context, _ int) error {
		got, err := kv.Get(ctx, "bench")
		if err != nil {
			return err
		}
		return answered("the engine's keyvalue get", got, value)
	}
}

// engineSet is one keyvalue set through the engine, each caller on a key
// of its own.
func engineSet(nc *nats.Conn) func(ctx context.Context, caller int) error {
	kv := natsclient.NewKeyValue(natsclient.New(nc))
	return func(ctx context.Context, caller int) error {
		return kv.Set(ctx, fmt.Sprintf("bench/%d", caller), value, 0)
	}
}

// pairRounds is how many turns a paired ratio takes.
const pairRounds = 5

// paired drives the engine's path and its peer's in turns, pairRounds
// times each for a fifth of the load's duration, at callers callers, and
// returns the median of the turns' ratios, engine over peer. The
// headline ratios divide figures measured minutes apart, and a machine
// whose speed drifts over minutes (a noisy neighbour, a throttled core)
// moves them by up to a quarter; the two sides of a turn are a second
// apart.
func (b *bench) paired(ctx context.Context, engine, peer func(ctx context.Context, caller int) error) (*float64, error) {
	e, p, err := b.turns(ctx, pairRounds, engine, peer)
	if err != nil {
		return nil, fmt.Errorf("paired: %w", err)
	}
	ratios := make([]float64, 0, pairRounds)
	for i := range e {
		if p[i] > 0 {
			ratios = append(ratios, e[i]/p[i])
		}
	}
	if len(ratios) == 0 {
		return nil, errors.New("paired: the peer answered nothing")
	}
	slices.Sort(ratios)
	return ratio(ratios[len(ratios)/2], 1), nil
}

// turns drives first and second in turns, rounds times each for a rounds-th of the
// load's duration, at callers callers, and returns the calls per second
// of each turn, in order. Neither side is always the one that warmed the
// backend up or that a busy moment of the machine fell on.
func (b *bench) turns(ctx context.Context, rounds int, first, second func(ctx context.Context, caller int) error) (firsts, seconds []float64, err error) {
	d := b.duration / time.Duration(rounds)
	for range rounds {
		x, err := drive(ctx, callers, d, first)
		if err != nil {
			return nil, nil, fmt.Errorf("the first: %w", err)
		}
		y, err := drive(ctx, callers, d, second)
		if err != nil {
			return nil, nil, fmt.Errorf("the second: %w", err)
		}
		firsts, seconds = append(firsts, x.rps), append(seconds, y.rps)
	}
	return firsts, seconds, nil
}

// natsPeers measures what a user would pick instead of the engine: a
// file-backed R1 key-value bucket (gets are direct gets) and an object
// store, on the same broker.
func (b *bench) natsPeers(ctx context.Context, nc *nats.Conn) (natsKV, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return natsKV{}, err
	}
	kv, peers, err := natsBucket(ctx, js)
	if err != nil {
		return natsKV{}, err
	}
	if err := b.measureNATSPeers(ctx, js, kv, peers); err != nil {
		peers.close()
		return natsKV{}, err
	}
	return peers, nil
}

// natsBucket makes the file-backed R1 key-value bucket a user would pick
// instead of the engine's keyvalue, and its get and put of the 16-byte
// value; close deletes it.
func natsBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, natsKV, error) {
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "ENGINEBENCH_KV", Storage: jetstream.FileStorage, Replicas: 1})
	if err != nil {
		return nil, natsKV{}, err
	}
	return kv, natsKV{
		get: func(ctx context.Context, _ int) error {
			entry, err := kv.Get(ctx, "bench")
			if err != nil {
				return err
			}
			return answered("NATS KV's get", entry.Value(), value)
		},
		put: func(ctx context.Context, caller int) error {
			_, err := kv.Put(ctx, fmt.Sprintf("bench.%d", caller), value)
			return err
		},
		close: func() { _ = js.DeleteKeyValue(context.Background(), "ENGINEBENCH_KV") },
	}, nil
}

// natsKV is the NATS key-value bucket of the throughput scenario, up until
// close.
type natsKV struct {
	get, put func(ctx context.Context, caller int) error
	close    func()
}

func (b *bench) measureNATSPeers(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, peers natsKV) error {
	if _, err := kv.Put(ctx, "bench", value); err != nil {
		return err
	}
	get, err := b.curve(ctx, pathNATSKV, peers.get)
	if err != nil {
		return err
	}
	put, err := drive(ctx, callers, b.duration, peers.put)
	if err != nil {
		return fmt.Errorf("put: %w", err)
	}
	b.result.NATSKVGetRPS, b.result.NATSKVPutRPS = ptr(get.rps), ptr(put.rps)

	objects, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "ENGINEBENCH_OBJ", Storage: jetstream.FileStorage, Replicas: 1})
	if err != nil {
		return err
	}
	defer func() { _ = js.DeleteObjectStore(context.Background(), "ENGINEBENCH_OBJ") }()
	data := objectData()
	putMiB, getMiB, err := b.transfers(ctx, data,
		func(ctx context.Context) error {
			_, err := objects.PutBytes(ctx, "bench", data)
			return err
		},
		func(ctx context.Context) (io.ReadCloser, error) { return objects.Get(ctx, "bench") })
	if err != nil {
		return fmt.Errorf("object store: %w", err)
	}
	b.result.NATSObjPutMiBS, b.result.NATSObjGetMiBS = ptr(putMiB), ptr(getMiB)
	return nil
}

// objectData is the object of the transfers, not all one byte, so that no
// layer on the way can shortcut it.
func objectData() []byte {
	data := make([]byte, objectSize)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	return data
}

// transfers puts data again and again for the load's duration (at least
// once), then reads it back the same way, one caller at a time, and
// returns the MiB/s of each. Every side's get is read here, in the same
// way, into a sink that holds it to data byte for byte: a get that
// answers other bytes, or too few or too many, fails the load, and no
// side pays for a way of reading that the other does not.
func (b *bench) transfers(ctx context.Context, data []byte, put func(context.Context) error, get func(context.Context) (io.ReadCloser, error)) (putMiB, getMiB float64, err error) {
	rate := func(f func(context.Context) error) (float64, error) {
		var moved int
		start := time.Now()
		for moved == 0 || time.Since(start) < b.duration {
			tctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := f(tctx)
			cancel()
			if err != nil {
				return 0, err
			}
			moved += len(data)
		}
		return round(float64(moved) / (1 << 20) / time.Since(start).Seconds()), nil
	}
	if putMiB, err = rate(put); err != nil {
		return 0, 0, fmt.Errorf("put: %w", err)
	}
	getMiB, err = rate(func(ctx context.Context) error {
		rc, err := get(ctx)
		if err != nil {
			return err
		}
		sink := &sameBytes{want: data}
		_, err = io.Copy(sink, rc)
		if err = errors.Join(err, rc.Close()); err != nil {
			return err
		}
		if sink.n != len(data) {
			return fmt.Errorf("read %d bytes, want %d", sink.n, len(data))
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("get: %w", err)
	}
	return putMiB, getMiB, nil
}

// sameBytes takes what a get reads and fails at the first byte that is not
// the object's, or past its end.
type sameBytes struct {
	want []byte
	n    int
}

func (s *sameBytes) Write(p []byte) (int, error) {
	rest := s.want[s.n:]
	n := min(len(p), len(rest))
	if !bytes.Equal(p[:n], rest[:n]) {
		i := 0
		for p[i] == rest[i] {
			i++
		}
		return i, fmt.Errorf("read byte %d as %#x, put as %#x", s.n+i, p[i], rest[i])
	}
	s.n += n
	if n < len(p) {
		return n, fmt.Errorf("read more than the %d bytes put", len(s.want))
	}
	return n, nil
}

// engineGets starts an engine on c, writes the value and drives gets of
// it along the scaling curve. The engine is left to the caller only
// through more; it is stopped on return.
func (b *bench) engineGets(ctx context.Context, c engineConfig, nc *nats.Conn, path string, more ...func(context.Context) error) (stats, error) {
	config, err := b.writeConfig(c)
	if err != nil {
		return stats{}, err
	}
	e, err := b.engine(ctx, config, "serving")
	if err != nil {
		return stats{}, err
	}
	// The next engine on this broker claims the lease this one releases.
	defer e.stop(10 * time.Second)
	get, err := b.driveEngine(ctx, nc, path, more)
	if err != nil {
		return stats{}, e.explain(err)
	}
	return get, nil
}

func (b *bench) driveEngine(ctx context.Context, nc *nats.Conn, path string, more []func(context.Context) error) (stats, error) {
	kv := natsclient.NewKeyValue(natsclient.New(nc))
	if err := kv.Set(ctx, "bench", value, 0); err != nil {
		return stats{}, err
	}
	get, err := b.curve(ctx, path, engineGet(nc))
	if err != nil {
		return stats{}, err
	}
	for _, f := range more {
		if err := f(ctx); err != nil {
			return stats{}, err
		}
	}
	return get, nil
}

// kvSets drives sets, each caller on keys of its own.
func (b *bench) kvSets(ctx context.Context, nc *nats.Conn) (stats, error) {
	st, err := drive(ctx, callers, b.duration, engineSet(nc))
	if err != nil {
		return stats{}, fmt.Errorf("set: %w", err)
	}
	return st, nil
}

// sqliteEngine measures the embedded defaults: keyvalue gets along the
// curve and sets, document gets and puts, object transfers.
func (b *bench) sqliteEngine(ctx context.Context, url string, nc *nats.Conn, peers natsKV) error {
	r := &b.result
	get, err := b.engineGets(ctx, engineConfig{url: url, lease: b.lease, sqlite: true}, nc, pathSQLite,
		func(ctx context.Context) error {
			set, err := b.kvSets(ctx, nc)
			if err != nil {
				return err
			}
			r.KVSetRPSSQLite = ptr(set.rps)
			return nil
		},
		func(ctx context.Context) (err error) {
			if r.PairedSQLiteToRaw, err = b.paired(ctx, engineGet(nc), rawCall(nc)); err != nil {
				return err
			}
			if r.PairedSQLiteToNATSKV, err = b.paired(ctx, engineGet(nc), peers.get); err != nil {
				return err
			}
			r.PairedSQLiteSetToNATSKVPut, err = b.paired(ctx, engineSet(nc), peers.put)
			return err
		},
		b.documents(nc),
		b.objects(nc))
	if err != nil {
		return err
	}
	r.KVGetRPSSQLite = ptr(get.rps)
	return nil
}

// embedded measures the path a new user runs first: an engine started
// with no configuration, in an empty directory, runs the broker in its own
// process and keeps its keyvalue on SQLite. NATS's bucket is made on that
// broker, and the two are driven in turns, get against get and set
// against put. Both then are answered in the process that runs the broker.
func (b *bench) embedded(ctx context.Context) error {
	if listening(defaultNATS) || listening(defaultHTTP) {
		b.note("embedded figures absent: %s or %s was in use, where an engine with no configuration runs its broker and its HTTP API", defaultNATS, defaultHTTP)
		return nil
	}
	dir, err := b.lab.mkdir("embedded")
	if err != nil {
		return err
	}
	p, err := b.lab.start(dir, nil, b.lab.engine)
	if err != nil {
		return err
	}
	defer p.stop(startTimeout)
	if _, _, err := waitReady(ctx, p, defaultHTTP); err != nil {
		return p.explain(err)
	}
	nc, err := nats.Connect("nats://" + defaultNATS)
	if err != nil {
		return p.explain(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv, peers, err := natsBucket(ctx, js)
	if err != nil {
		return p.explain(err)
	}
	defer peers.close()
	if _, err := kv.Put(ctx, "bench", value); err != nil {
		return err
	}
	if err := natsclient.NewKeyValue(natsclient.New(nc)).Set(ctx, "bench", value, 0); err != nil {
		return p.explain(err)
	}
	r := &b.result
	if r.PairedEmbeddedSQLiteToNATSKV, err = b.paired(ctx, engineGet(nc), peers.get); err != nil {
		return p.explain(err)
	}
	if r.PairedEmbeddedSQLiteSetToNATSKVPut, err = b.paired(ctx, engineSet(nc), peers.put); err != nil {
		return p.explain(err)
	}
	return nil
}

// documents drives document gets of one small document, then puts, each
// caller on a document of its own.
func (b *bench) documents(nc *nats.Conn) func(context.Context) error {
	return func(ctx context.Context) error {
		docs := natsclient.NewDocument(natsclient.New(nc))
		if err := docs.EnsureCollection(ctx, "bench"); err != nil {
			return err
		}
		data := map[string]any{"name": "bench", "n": 1.0}
		if _, err := docs.Put(ctx, "bench", "doc", data, ports.Cond{}); err != nil {
			return err
		}
		get, err := drive(ctx, callers, b.duration, func(ctx context.Context, _ int) error {
			d, err := docs.Get(ctx, "bench", "doc")
			if err != nil {
				return err
			}
			if d.Data["name"] != data["name"] || d.Data["n"] != data["n"] {
				return fmt.Errorf("the document get answered %v, want %v", d.Data, data)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("document get: %w", err)
		}
		put, err := drive(ctx, callers, b.duration, func(ctx context.Context, caller int) error {
			_, err := docs.Put(ctx, "bench", fmt.Sprintf("doc-%d", caller), data, ports.Cond{})
			return err
		})
		if err != nil {
			return fmt.Errorf("document put: %w", err)
		}
		b.result.DocGetRPS, b.result.DocPutRPS = ptr(get.rps), ptr(put.rps)
		return nil
	}
}

// objects puts and gets the 64 MiB object through the engine's object
// storage, as transfers.
func (b *bench) objects(nc *nats.Conn) func(context.Context) error {
	return func(ctx context.Context) error {
		objs := natsclient.NewObjectStorage(natsclient.New(nc))
		data := objectData()
		put, get, err := b.transfers(ctx, data,
			func(ctx context.Context) error {
				_, err := objs.Put(ctx, "bench", bytes.NewReader(data), ports.PutObjectOptions{})
				return err
			},
			func(ctx context.Context) (io.ReadCloser, error) {
				rc, _, err := objs.Get(ctx, "bench", ports.GetObjectOptions{})
				return rc, err
			})
		if err != nil {
			return fmt.Errorf("objects: %w", err)
		}
		b.result.ObjPutMiBS, b.result.ObjGetMiBS = ptr(put), ptr(get)
		return nil
	}
}

// postgres measures the engine on PostgreSQL and a direct pgx client on
// the same server, each in a table of its own that it drops afterwards.
func (b *bench) postgres(ctx context.Context, url string, nc *nats.Conn, dsn string) error {
	r := &b.result
	stamp := time.Now().UnixNano()
	direct := fmt.Sprintf("enginebench_pgx_%d", stamp)
	defer dropTable(dsn, direct)
	peer, err := newPGXPeer(ctx, dsn, direct)
	if err != nil {
		return err
	}
	defer peer.pool.Close()
	table := fmt.Sprintf("enginebench_kv_%d", stamp)
	defer dropTable(dsn, table)
	get, err := b.engineGets(ctx, engineConfig{url: url, lease: b.lease, dsn: dsn, table: table}, nc, pathPostgres,
		func(ctx context.Context) error {
			set, err := b.kvSets(ctx, nc)
			if err != nil {
				return err
			}
			r.KVSetRPSPostgres = ptr(set.rps)
			return nil
		},
		func(ctx context.Context) (err error) {
			if r.PairedPGToPGX, err = b.paired(ctx, engineGet(nc), peer.get); err != nil {
				return err
			}
			r.PairedPGSetToPGXSet, err = b.paired(ctx, engineSet(nc), peer.set)
			return err
		})
	if err != nil {
		return err
	}
	r.KVGetRPSPostgres = ptr(get.rps)
	if err := b.pgx(ctx, peer); err != nil {
		return err
	}
	fenced := fmt.Sprintf("enginebench_fence_%d", stamp)
	defer dropTable(dsn, fenced)
	return b.fencing(ctx, dsn, fenced)
}

// fencing measures what a fencing token costs a write: the PostgreSQL
// keyvalue store's Set from as many goroutines as the engine's callers,
// without a token and with one (the check and the write in one batch, as
// every engine write runs).
func (b *bench) fencing(ctx context.Context, dsn, table string) error {
	store, err := kvpostgres.Open(ctx, kvpostgres.Config{DSN: dsn, Table: table})
	if err != nil {
		return err
	}
	defer store.Close()
	defer dropFence(dsn, table)
	plainSet := func(ctx context.Context, caller int) error {
		return store.Set(ctx, fmt.Sprintf("bench/%d", caller), value, 0)
	}
	fencedSet := func(ctx context.Context, caller int) error {
		return plainSet(ports.WithFencingToken(ctx, 1), caller)
	}
	// Each figure is the median of its turns.
	plain, fenced, err := b.turns(ctx, 3, plainSet, fencedSet)
	if err != nil {
		return fmt.Errorf("store set, without a token and with one: %w", err)
	}
	slices.Sort(plain)
	slices.Sort(fenced)
	b.result.PGStoreSetRPS, b.result.PGStoreSetFencedRPS = ptr(plain[1]), ptr(fenced[1])
	return nil
}

// dropFence removes the fence row the bench's store left.
func dropFence(dsn, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DELETE FROM abi_engine_fence WHERE scope = $1", table)
}

// pgxPeer is the peer of the engine on PostgreSQL: a pool with pgx's
// defaults (as the adapter's), at the adapter's isolation, and the
// adapter's get, on a table of the same shape; a set is one statement of
// its own, as a plain client writes it.
type pgxPeer struct {
	pool     *pgxpool.Pool
	get, set func(ctx context.Context, caller int) error
}

func newPGXPeer(ctx context.Context, dsn, table string) (pgxPeer, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return pgxPeer{}, err
	}
	// The engine's stores run every connection at READ COMMITTED, whatever
	// the server's, role's or dsn's default (internal/pgdb); at a stricter
	// default the peer would pay for checks the engine does not.
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SET default_transaction_isolation TO 'read committed'")
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return pgxPeer{}, err
	}
	t := pgx.Identifier{table}.Sanitize()
	const live = "(expires_at IS NULL OR expires_at > clock_timestamp())"
	set := `INSERT INTO ` + t + ` (key, value, expires_at) VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 microsecond')
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at`
	_, err = pool.Exec(ctx, `CREATE TABLE `+t+` (key text COLLATE "C" PRIMARY KEY, value bytea NOT NULL, expires_at timestamptz)`)
	if err == nil {
		_, err = pool.Exec(ctx, set, "bench", value, nil)
	}
	if err != nil {
		pool.Close()
		return pgxPeer{}, err
	}
	return pgxPeer{
		pool: pool,
		get: func(ctx context.Context, _ int) error {
			var v []byte
			if err := pool.QueryRow(ctx, "SELECT value FROM "+t+" WHERE key = $1 AND "+live, "bench").Scan(&v); err != nil {
				return err
			}
			return answered("pgx's get", v, value)
		},
		set: func(ctx context.Context, caller int) error {
			_, err := pool.Exec(ctx, set, fmt.Sprintf("bench/%d", caller), value, nil)
			return err
		},
	}, nil
}

// pgx drives the peer from as many goroutines as the engine's callers.
func (b *bench) pgx(ctx context.Context, peer pgxPeer) error {
	get, err := drive(ctx, callers, b.duration, peer.get)
	if err != nil {
		return fmt.Errorf("pgx get: %w", err)
	}
	put, err := drive(ctx, callers, b.duration, peer.set)
	if err != nil {
		return fmt.Errorf("pgx set: %w", err)
	}
	b.result.PGXGetRPS, b.result.PGXSetRPS = ptr(get.rps), ptr(put.rps)
	return nil
}
