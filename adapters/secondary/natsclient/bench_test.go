package natsclient_test

import (
	"context"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/keyvalue/sqlite"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// benchCallers is how many goroutines call at once in both benchmarks, so
// the kernel call and the raw echo are compared at the same parallelism.
const benchCallers = 64

// parallel runs call from benchCallers goroutines over one embedded broker
// and reports the calls per second next to ns/op.
func parallel(b *testing.B, call func(ctx context.Context) error) {
	b.Helper()
	b.SetParallelism(max(1, benchCallers/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := call(ctx)
			cancel()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

// BenchmarkRawEcho is the floor: plain nats.go request/reply to a queue
// subscriber that answers at once.
func BenchmarkRawEcho(b *testing.B) {
	url := natstest.StartServer(b).ClientURL()
	responder := natstest.Connect(b, url)
	if _, err := responder.QueueSubscribe("bench.echo", "bench", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		b.Fatal(err)
	}
	if err := responder.Flush(); err != nil {
		b.Fatal(err)
	}
	caller := natstest.Connect(b, url)
	body := []byte(`{"key":"bench"}`)
	parallel(b, func(ctx context.Context) error {
		_, err := caller.RequestWithContext(ctx, "bench.echo", body)
		return err
	})
}

// BenchmarkKeyValueGet is a kernel call end to end: the facade, the broker,
// the host with its accounting and the memory adapter. Its allocs/op is
// the figure the issue of the kernel call's speed states (55 before the
// hand readers).
func BenchmarkKeyValueGet(b *testing.B) {
	store, err := memory.Open(b.Context(), memory.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	benchGet(b, store)
}

// BenchmarkKeyValueGetSQLite is the same call on the default adapter.
func BenchmarkKeyValueGetSQLite(b *testing.B) {
	store, err := sqlite.Open(b.Context(), sqlite.Config{Path: filepath.Join(b.TempDir(), "kv.sqlite")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	benchGet(b, store)
}

// BenchmarkKeyValueSet is a set end to end on the memory adapter: what a
// set costs the engine besides its store.
func BenchmarkKeyValueSet(b *testing.B) {
	store, err := memory.Open(b.Context(), memory.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	benchSet(b, store)
}

// BenchmarkKeyValueSetSQLite is the same set on the default adapter.
func BenchmarkKeyValueSetSQLite(b *testing.B) {
	store, err := sqlite.Open(b.Context(), sqlite.Config{Path: filepath.Join(b.TempDir(), "kv.sqlite")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	benchSet(b, store)
}

// The peers a user would weigh the engine against: NATS's own key-value,
// a file-backed bucket with one replica on the same kind of broker, got
// and put by 64 callers on one connection, as the engine's benchmarks
// call. Run beside them (-bench 'RawEcho|NATSKV|KeyValue'), they give the
// ratios of the kernel call's aims in one run; cmd/enginebench takes the
// same figures with the engine in a process of its own.

// BenchmarkNATSKVGet is the peer of BenchmarkKeyValueGet: a direct get.
func BenchmarkNATSKVGet(b *testing.B) {
	kv := natsBucket(b)
	if _, err := kv.Put(b.Context(), "bench", []byte("0123456789abcdef")); err != nil {
		b.Fatal(err)
	}
	parallel(b, func(ctx context.Context) error {
		_, err := kv.Get(ctx, "bench")
		return err
	})
}

// BenchmarkNATSKVPut is the peer of BenchmarkKeyValueSetSQLite, on the
// same keys as benchSet.
func BenchmarkNATSKVPut(b *testing.B) {
	kv := natsBucket(b)
	var next atomic.Int64
	value := []byte("0123456789abcdef")
	parallel(b, func(ctx context.Context) error {
		_, err := kv.Put(ctx, "bench/"+strconv.FormatInt(next.Add(1)%1000, 10), value)
		return err
	})
}

func natsBucket(b *testing.B) jetstream.KeyValue {
	b.Helper()
	js, err := jetstream.New(natstest.Connect(b, natstest.StartServer(b).ClientURL()))
	if err != nil {
		b.Fatal(err)
	}
	kv, err := js.CreateKeyValue(b.Context(), jetstream.KeyValueConfig{Bucket: "BENCH", Storage: jetstream.FileStorage, Replicas: 1})
	if err != nil {
		b.Fatal(err)
	}
	return kv
}

func benchGet(b *testing.B, store ports.KeyValue) {
	b.Helper()
	if err := store.Set(b.Context(), "bench", []byte("0123456789abcdef"), 0); err != nil {
		b.Fatal(err)
	}
	kv := hostBench(b, store)
	parallel(b, func(ctx context.Context) error {
		_, err := kv.Get(ctx, "bench")
		return err
	})
}

// benchSet sets the same 16-byte value, each goroutine on keys of its own.
func benchSet(b *testing.B, store ports.KeyValue) {
	b.Helper()
	kv := hostBench(b, store)
	var next atomic.Int64
	value := []byte("0123456789abcdef")
	parallel(b, func(ctx context.Context) error {
		return kv.Set(ctx, "bench/"+strconv.FormatInt(next.Add(1)%1000, 10), value, 0)
	})
}

// hostBench puts store behind a host on a new broker, as the engine does, and
// returns the facade a caller uses.
func hostBench(b *testing.B, store ports.KeyValue) natsclient.KeyValue {
	b.Helper()
	return natsclient.NewKeyValue(natsclient.New(serveBench(b, natsapi.KeyValue(store))))
}

// serveBench serves service from a host on a new broker, as the engine does,
// and returns a caller's connection to that broker.
func serveBench(b *testing.B, service natsapi.Service) *nats.Conn {
	b.Helper()
	url := natstest.StartServer(b).ClientURL()
	host, err := natsapi.NewHost(natsapi.Options{
		Owner:   domain.NewInstanceID(),
		Connect: func() (*nats.Conn, error) { return nats.Connect(url) },
		Replies: natstest.Connect(b, url),
		// As in the engine, every call is admitted under the serving
		// term's fencing token.
		Admit: func() (uint64, bool) { return 1, true },
	}, service)
	if err != nil {
		b.Fatal(err)
	}
	if err := host.Serve(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(host.Stop)
	return natstest.Connect(b, url)
}

// BenchmarkDocumentGet is a document get end to end on the memory adapter,
// a small document and one of 200 records of five fields (about 20 KiB):
// what the answer costs beside a keyvalue get's.
func BenchmarkDocumentGet(b *testing.B) {
	records := make([]any, 200)
	for i := range records {
		records[i] = map[string]any{"id": "r" + strconv.Itoa(i), "name": "a record", "n": float64(i), "ok": i%2 == 0, "tags": []any{"x", "y"}}
	}
	for _, c := range []struct {
		name string
		data map[string]any
	}{
		{"small", map[string]any{"name": "bench", "n": 1.0}},
		{"records", map[string]any{"records": records}},
	} {
		b.Run(c.name, func(b *testing.B) {
			store := docmemory.New()
			if err := store.EnsureCollection(b.Context(), "bench"); err != nil {
				b.Fatal(err)
			}
			if _, err := store.Put(b.Context(), "bench", "d1", c.data, ports.Cond{}); err != nil {
				b.Fatal(err)
			}
			docs := natsclient.NewDocument(natsclient.New(serveBench(b, natsapi.Document(store))))
			parallel(b, func(ctx context.Context) error {
				_, err := docs.Get(ctx, "bench", "d1")
				return err
			})
		})
	}
}
