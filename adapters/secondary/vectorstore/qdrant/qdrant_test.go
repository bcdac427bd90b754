package qdrant_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/qdrant"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/ports"
)

// config reads the server from ENGINE_TEST_QDRANT_ADDR (host:port of the
// gRPC port). No Qdrant server runs in CI, so the suite skips without it
// even when backends are required.
func config(t *testing.T) qdrant.Config {
	addr := testenv.Lookup(t, "ENGINE_TEST_QDRANT_ADDR", "Qdrant", true)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("ENGINE_TEST_QDRANT_ADDR=%q: want host:port: %v", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("ENGINE_TEST_QDRANT_ADDR=%q: port: %v", addr, err)
	}
	return qdrant.Config{Host: host, Port: p}
}

func TestVectorStoreContract(t *testing.T) {
	t.Run("qdrant", func(t *testing.T) {
		base := config(t)
		contracttests.RunVectorStore(t, contracttests.HarnessFunc[ports.VectorStore](func(t *testing.T) func(*testing.T) ports.VectorStore {
			// A prefix of its own gives each subtest an empty store on the
			// shared server; its collections are dropped afterwards.
			b := make([]byte, 6)
			rand.Read(b)
			c := base
			c.CollectionPrefix = "t" + hex.EncodeToString(b) + "_"
			open := func(t *testing.T) ports.VectorStore {
				s, err := qdrant.Open(t.Context(), c)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
			cleaner := open(t)
			t.Cleanup(func() {
				// The test's own context has ended by the time cleanups run.
				cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cs, err := cleaner.Collections(cctx)
				if err != nil {
					t.Logf("list collections to drop: %v", err)
					return
				}
				for _, col := range cs {
					if err := cleaner.DeleteCollection(cctx, col.Name); err != nil {
						t.Logf("drop %s%s: %v", c.CollectionPrefix, col.Name, err)
					}
				}
			})
			return open
		}), contracttests.VectorStoreCapabilities{Approximate: true})
	})
}

func TestLocalStorageIsShared(t *testing.T) {
	if got := (qdrant.Config{Host: "qdrant.internal"}).LocalStorage(); got != "" {
		t.Fatalf("LocalStorage() = %q, want \"\": every engine reaches the server", got)
	}
}
