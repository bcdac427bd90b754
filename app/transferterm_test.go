package app_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// tokenObjects is an object storage adapter that notes the fencing token
// each Put brought, as an adapter that fences would read it.
type tokenObjects struct {
	*memory.Store
	noted func(token uint64)
}

func (s tokenObjects) Put(ctx context.Context, key string, r io.Reader, opts ports.PutObjectOptions) (ports.ObjectInfo, error) {
	token, _ := ports.FencingToken(ctx)
	s.noted(token)
	return s.Store.Put(ctx, key, r, opts)
}

type tokenObjectsConfig struct{}

func (tokenObjectsConfig) LocalStorage() string { return "this process" }

var (
	putTokensMu sync.Mutex
	putTokens   []uint64 // 0: a Put without a token
)

func init() {
	storage.Register(ports.ServiceObjectStorage, "token-recorder", func(ctx context.Context, _ tokenObjectsConfig) (tokenObjects, error) {
		s, err := memory.Open(ctx, memory.Config{})
		return tokenObjects{Store: s, noted: func(token uint64) {
			putTokensMu.Lock()
			defer putTokensMu.Unlock()
			putTokens = append(putTokens, token)
		}}, err
	})
}

// An object put through the engine reaches the store by a transfer, which
// runs after the call that opened it was answered: its Put carries the
// fencing token of the engine's serving term all the same.
func TestAnObjectPutThroughTheEngineCarriesItsTermsToken(t *testing.T) {
	putTokensMu.Lock()
	putTokens = nil
	putTokensMu.Unlock()
	url := natstest.StartServer(t).ClientURL()
	eng, a := start(t, testConfig(t, url, "serve", "", `
services:
  keyvalue: {adapter: memory}
  document: {adapter: memory}
  object_storage: {adapter: token-recorder}
  vector_store: {adapter: memory}
  cache: {adapter: memory}
  secret: {adapter: env}
`))
	// Stopped before the broker: an engine whose broker goes away first
	// ends the process 20 s later, the next test's run with it.
	defer a.RequireStop()
	token, serving := eng.Ownership().Term()
	if !serving || token == 0 {
		t.Fatalf("the engine does not serve: term %d, %v", token, serving)
	}
	objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := objects.Put(ctx, "k", strings.NewReader(strings.Repeat("x", 600<<10)), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	putTokensMu.Lock()
	defer putTokensMu.Unlock()
	if len(putTokens) != 1 || putTokens[0] != token {
		t.Fatalf("the store's Puts carried the tokens %v, want one Put under the engine's term %d", putTokens, token)
	}
}
