package app_test

import (
	"context"
	"sync"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// termStore is a keyvalue adapter that records when the engine ends its
// term in it.
type termStore struct {
	*memory.Store
	ended func(token uint64)
}

func (s termStore) EndTerm(token uint64) { s.ended(token) }

type termStoreConfig struct{}

func (termStoreConfig) LocalStorage() string { return "this process" }

var (
	termMu    sync.Mutex
	termEnded func(token uint64)
)

func init() {
	storage.Register(ports.ServiceKeyValue, "term-recorder", func(ctx context.Context, _ termStoreConfig) (termStore, error) {
		s, err := memory.Open(ctx, memory.Config{})
		return termStore{Store: s, ended: func(token uint64) {
			termMu.Lock()
			defer termMu.Unlock()
			if termEnded != nil {
				termEnded(token)
			}
		}}, err
	})
}

// A store that keeps reads for the serving term hears that the term is
// over before the release is written: once it is, the successor may write,
// and what the store kept must no longer answer the calls the old engine
// drains.
func TestATermEndsInTheStoresBeforeTheRelease(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	eng, a := start(t, testConfig(t, url, "serve", "", `
services:
  keyvalue: {adapter: term-recorder}
  document: {adapter: memory}
  object_storage: {adapter: memory}
  vector_store: {adapter: memory}
  cache: {adapter: memory}
  secret: {adapter: env}
`))
	token, serving := eng.Ownership().Term()
	if !serving || token == 0 {
		t.Fatalf("the engine does not serve: term %d, %v", token, serving)
	}
	type end struct {
		token uint64
		state domain.State
	}
	var ends []end
	termMu.Lock()
	termEnded = func(tok uint64) { ends = append(ends, end{tok, eng.Ownership().State()}) }
	termMu.Unlock()
	t.Cleanup(func() {
		termMu.Lock()
		termEnded = nil
		termMu.Unlock()
	})
	a.RequireStop()
	termMu.Lock()
	defer termMu.Unlock()
	// Before the release, the engine serves, or has fenced itself if a
	// renewal came late on a busy machine.
	if len(ends) != 1 || ends[0].token < token || ends[0].state == domain.StateReleased {
		t.Fatalf("EndTerm calls %+v; want one, ending term %d or later, before the release", ends, token)
	}
	if got := eng.Ownership().State(); got != domain.StateReleased {
		t.Fatalf("after the stop the engine is %v, want released", got)
	}
}
