package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/document/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/internal/jstest"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// open opens a store on a connection of its own, closed when the test ends.
func open(t *testing.T, url string, c jetstream.Config) *jetstream.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := jetstream.Open(ctx, c, natstest.Connect(t, url))
	if err != nil {
		t.Fatalf("Open bucket %s: %v", c.Bucket, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestDocumentContract(t *testing.T) {
	jstest.Run(t, func(t *testing.T, url string, replicas int) {
		contracttests.RunDocument(t, contracttests.HarnessFunc[ports.DocumentStore](func(t *testing.T) func(*testing.T) ports.DocumentStore {
			c := jetstream.Config{Bucket: jstest.Bucket(t), Replicas: replicas}
			return func(t *testing.T) ports.DocumentStore { return open(t, url, c) }
		}), contracttests.DocumentCapabilities{Durable: true, Fenced: true})
	})
}
