package natsclient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/ports"
)

// answerByOfGets is a store that tells, for each get it is asked, the
// moment its answer is due (ports.AnswerBy), if the call had one.
type answerByOfGets struct {
	ports.KeyValue
	due chan time.Time
}

func (s answerByOfGets) Get(ctx context.Context, key string) ([]byte, error) {
	by, _ := ports.AnswerBy(ctx)
	s.due <- by
	return s.KeyValue.Get(ctx, key)
}

// A get, the call the client writes by hand to allocate little, says as
// every call does how long its caller still waits (Abi-Wait, ADR 0021):
// the store it reaches has the moment its answer is due, before the
// caller's deadline, so one that waits on a lock gives up in time to say
// it did nothing.
func TestAGetTellsTheStoreWhenItsAnswerIsDue(t *testing.T) {
	store, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	spy := answerByOfGets{KeyValue: store, due: make(chan time.Time, 1)}
	kv := natsclient.NewKeyValue(serve(t, natsapi.KeyValue(spy))(t))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	if _, err := kv.Get(ctx, "k"); err != nil && !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Get: %v", err)
	}
	var by time.Time
	select {
	case by = <-spy.due:
	default:
		t.Fatal("the get did not reach the store")
	}
	if by.IsZero() || !by.Before(deadline) {
		t.Fatalf("the store's get had its answer due at %v; want a moment before the caller's deadline %v", by, deadline)
	}
}
