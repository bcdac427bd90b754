package natsclient_test

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// benchObjectSize is the object the transfer benchmarks move, as
// enginebench does.
const benchObjectSize = 64 << 20

func benchObject() []byte {
	data := make([]byte, benchObjectSize)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	return data
}

// BenchmarkObjectTransfer puts and gets a 64 MiB object through the
// engine's transfers, on the memory adapter, with chunks of each size, so
// the chunk size's effect shows in one run; BenchmarkNATSObjectStore is its
// peer.
func BenchmarkObjectTransfer(b *testing.B) {
	data := benchObject()
	for _, tc := range []struct{ chunk, window int }{
		{64 << 10, 1},
		{natsapi.DefaultTransferChunkSize, 1},
		{natsapi.DefaultTransferChunkSize, 2},
		{natsapi.DefaultTransferChunkSize, 8},
		{natsapi.DefaultTransferChunkSize, natsapi.DefaultTransferWindow},
		{512 << 10, natsapi.DefaultTransferWindow},
	} {
		objects := objectBench(b, natsapi.TransferOptions{ChunkSize: tc.chunk, Window: tc.window})
		name := fmt.Sprintf("chunk=%dKiB/window=%d", tc.chunk>>10, tc.window)
		b.Run(name+"/put", func(b *testing.B) {
			b.SetBytes(benchObjectSize)
			for b.Loop() {
				if _, err := objects.Put(b.Context(), "bench", bytes.NewReader(data), ports.PutObjectOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/get", func(b *testing.B) {
			b.SetBytes(benchObjectSize)
			for b.Loop() {
				rc, _, err := objects.Get(b.Context(), "bench", ports.GetObjectOptions{})
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, rc)
				_ = rc.Close()
				if err != nil || n != benchObjectSize {
					b.Fatalf("got %d bytes: %v", n, err)
				}
			}
		})
	}
}

// BenchmarkNATSObjectStore is the peer: NATS's own object store, file
// backed, one replica.
func BenchmarkNATSObjectStore(b *testing.B) {
	data := benchObject()
	js, err := jetstream.New(natstest.Connect(b, natstest.StartServer(b).ClientURL()))
	if err != nil {
		b.Fatal(err)
	}
	store, err := js.CreateObjectStore(b.Context(), jetstream.ObjectStoreConfig{Bucket: "BENCH_OBJ", Storage: jetstream.FileStorage, Replicas: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("put", func(b *testing.B) {
		b.SetBytes(benchObjectSize)
		for b.Loop() {
			if _, err := store.PutBytes(b.Context(), "bench", data); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The get is read as BenchmarkObjectTransfer reads the engine's:
	// streamed into io.Discard. GetBytes would read it into a buffer that
	// grows by doubling, and run at a fifth to two thirds of this rate.
	b.Run("get", func(b *testing.B) {
		b.SetBytes(benchObjectSize)
		for b.Loop() {
			r, err := store.Get(b.Context(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, r)
			_ = r.Close()
			if err != nil || n != benchObjectSize {
				b.Fatalf("got %d bytes: %v", n, err)
			}
		}
	})
}

// objectBench serves the memory object store behind an engine whose
// transfers move chunks of chunk bytes, on a broker of its own, and
// returns the facade a caller uses.
func objectBench(b *testing.B, transfers natsapi.TransferOptions) natsclient.ObjectStorage {
	b.Helper()
	store, err := memory.Open(b.Context(), memory.Config{})
	if err != nil {
		b.Fatal(err)
	}
	url := natstest.StartServer(b).ClientURL()
	serveEngineWith(b, url, transfers, func(tr *natsapi.TransferHost) []natsapi.Service {
		return []natsapi.Service{natsapi.ObjectStorage(store, tr)}
	})
	return natsclient.NewObjectStorage(natsclient.New(natstest.Connect(b, url)))
}
