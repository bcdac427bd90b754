package memory_test

import (
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/ports"
)

// stall is a payload value whose JSON encoding, which the store makes as
// it checks the batch, says it has begun and waits to be let go.
type stall struct {
	once            *sync.Once
	begun, released chan struct{}
}

func (p stall) MarshalJSON() ([]byte, error) {
	p.once.Do(func() { close(p.begun) })
	<-p.released
	return []byte(`"x"`), nil
}

// An upsert checks and copies its batch, normalising each payload, without
// holding the store: a get on the store goes on while it does. Before, the
// store was locked for writing from the start of an upsert, and a batch of
// 50,000 vectors of dimension 384 with small payloads held up every call
// on every collection for over a second.
func TestAnUpsertIsCheckedWithoutHoldingUpOtherCalls(t *testing.T) {
	ctx := t.Context()
	s, err := memory.Open(ctx, memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for _, c := range []string{"c", "other"} {
		if err := s.CreateCollection(ctx, c, 2, ports.MetricCosine); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Upsert(ctx, "other", []ports.Vector{{ID: "o", Values: []float32{0, 1}}}); err != nil {
		t.Fatal(err)
	}
	p := stall{once: new(sync.Once), begun: make(chan struct{}), released: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(p.released) }) }
	t.Cleanup(release)
	upserted := make(chan error, 1)
	go func() {
		upserted <- s.Upsert(ctx, "c", []ports.Vector{{ID: "v", Values: []float32{1, 0}, Payload: map[string]any{"p": p}}})
	}()
	select {
	case <-p.begun:
	case err := <-upserted:
		t.Fatalf("the upsert returned %v without encoding its payload", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the upsert did not encode its payload")
	}
	got := make(chan error, 1)
	go func() {
		_, err := s.Get(ctx, "other", "o")
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("a get while an upsert is checked: %v", err)
		}
	case <-time.After(20 * time.Second):
		release()
		<-got
		t.Fatal("a get waited for an upsert to check its batch")
	}
	release()
	if err := <-upserted; err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	if v, err := s.Get(ctx, "c", "v"); err != nil || v.Payload["p"] != "x" {
		t.Fatalf("Get of the upserted vector = %+v, %v; want its payload p: x", v, err)
	}
}
