package jsbucket

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// A bucket made before its store was fenced has no atomic batches, which
// a fenced conditional write needs: OpenFenced turns them on, and a write
// of an older term is then refused without changing the key.
func TestABucketMadeWithoutAtomicBatchesGetsThemWhenOpenedFenced(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), keyValueStream(Config{Bucket: "OLD", Replicas: 1}, "made before fences")); err != nil {
		t.Fatal(err)
	}
	b, err := OpenFenced(t.Context(), natstest.Connect(t, url), Config{Bucket: "OLD"}, "test")
	if err != nil {
		t.Fatalf("OpenFenced of a bucket without atomic batches: %v", err)
	}
	s, err := js.Stream(t.Context(), "KV_OLD")
	if err != nil {
		t.Fatal(err)
	}
	if !s.CachedInfo().Config.AllowAtomicPublish {
		t.Fatal("the stream still has no atomic batches")
	}
	rev, err := b.Put(ports.WithFencingToken(t.Context(), 7), "k", []byte("new"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Put(ports.WithFencingToken(t.Context(), 6), "k", []byte("old"), 0, &rev)
	if !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("a conditional write of an older term: %v, want ErrFenced", err)
	}
	if last, err := b.Last(t.Context(), "k"); err != nil || string(last.Value) != "new" || last.Revision != rev {
		t.Fatalf("the key holds %q at %d (%v); want the newer term's %q at %d", last.Value, last.Revision, err, "new", rev)
	}
}

// A bucket without atomic batches whose stream the engine's user may not
// update cannot be fenced: OpenFenced fails, naming the permission,
// rather than open a store that would not keep its fence. The server
// refuses the update at once, on the connection rather than in an
// answer, and OpenFenced fails as soon as it hears of it, well within a
// context shorter than the 6 s the update's request would wait. Before,
// it waited out that request and only then looked for the refusal, so an
// engine took 6 s to learn that its user lacked the right.
func TestOpenFencedOfABucketWithoutAtomicBatchesByAUserThatMayNotUpdateItFailsNamingThePermission(t *testing.T) {
	url, _ := natstest.MarkedBucket(t, "PLAIN")
	// Half the update's wait: generous for a refusal that comes back in
	// a round trip, and over before that request would give up.
	ctx, cancel := context.WithTimeout(t.Context(), attemptTimeout)
	t.Cleanup(cancel)
	_, err := OpenFenced(ctx, natstest.Connect(t, url, nats.UserInfo("engine", "engine")), Config{Bucket: "PLAIN"}, "test")
	if !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), "$JS.API.STREAM.UPDATE.KV_PLAIN") {
		t.Fatalf("OpenFenced: %v; want ErrPermission naming $JS.API.STREAM.UPDATE.KV_PLAIN", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("OpenFenced named the refusal only once its context of %v had ended", attemptTimeout)
	}
}

// A fenced conditional write goes as an atomic batch. When its
// acknowledgement comes too late, it is sent again as a batch of its own,
// whose first message the stream refuses on the key's revision, since the
// write moved it: the write was stored all the same, and Put reports it
// done at its revision, also when another write followed it.
func TestAFencedConditionalWriteStoredBeforeAnotherIsDoneThoughItsAcknowledgementCameTooLate(t *testing.T) {
	s := natstest.StartServer(t)
	got, ours := lateAckedConditionalWrite(t, s.Addr().String(), s.ClientURL(), 1)
	if got.err != nil || got.rev != ours {
		t.Fatalf("Put of a write stored at revision %d returned revision %d, %v; want it done at %d", ours, got.rev, got.err, ours)
	}
}

// On a replicated bucket the stream checks an atomic batch's messages in
// turn, the key's revision with the first, before it looks for the
// commit's message id among those it stored: a resend of a stored batch,
// after another write of the key, is refused on the revision as if
// nothing had been stored. Before, that refusal was told as a conflict
// (nothing written; under a newer term, ErrFenced: send it again), so a
// delete was run twice and a set_if_absent that set its value said it
// had not. The outcome is unknown, and said so.
func TestAFencedConditionalWriteWhoseAcknowledgementWasLostOnAReplicatedBucketIsNotCalledUndone(t *testing.T) {
	servers := natstest.StartCluster(t)
	got, ours := lateAckedConditionalWrite(t, servers[0].Addr().String(), natstest.URLs(servers...), 3)
	switch {
	case got.err == nil && got.rev == ours:
	case got.err == nil:
		t.Fatalf("Put of a write stored at revision %d returned revision %d", ours, got.rev)
	case errors.Is(got.err, ErrConflict) || errors.Is(got.err, ports.ErrConflict) ||
		errors.Is(got.err, ports.ErrNotDone) || errors.Is(got.err, ports.ErrFenced):
		t.Fatalf("Put of a write stored at revision %d failed as if nothing was written: %v", ours, got.err)
	}
}

// fencedWithFirst opens the fenced store c on nc and writes "first" to its
// key k under the fencing token of term. It returns the store and the
// revision written.
func fencedWithFirst(t *testing.T, term context.Context, nc *nats.Conn, c Config) (*Bucket, uint64) {
	t.Helper()
	b, err := OpenFenced(t.Context(), nc, c, "test")
	if err != nil {
		t.Fatal(err)
	}
	first, err := b.Put(term, "k", []byte("first"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, first
}

// lateAckedConditionalWrite makes a fenced conditional write through a
// proxy to the server at addr that holds its replies, lets another client
// write the key once the write is stored, and lets the replies go once
// the write was sent again. It returns what the write answered, and the
// revision it was stored at.
func lateAckedConditionalWrite(t *testing.T, addr, url string, replicas int) (lateAckResult, uint64) {
	t.Helper()
	proxy := startHoldingProxy(t, addr)
	term := ports.WithFencingToken(t.Context(), 3)
	b, first := fencedWithFirst(t, term, natstest.Connect(t, proxy.url()), Config{Bucket: "LATEF", Replicas: replicas})
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	other, err := js.KeyValue(t.Context(), "LATEF")
	if err != nil {
		t.Fatal(err)
	}

	// A fenced write is an atomic batch: each attempt carries its commit header.
	return storedThenOverwritten(t, proxy, other, "Nats-Batch-Commit", func() (uint64, error) {
		return b.Put(term, "k", []byte("ours"), 0, &first)
	})
}

// An older release beside this one may write the stream's whole config
// back as it read it, without atomic batches (when it drops the markers
// of expiry). A fenced conditional write, an atomic batch, is then refused
// (10174) having stored nothing: the store turns the setting on again and
// sends the write again, rather than fail every such write until it is
// opened anew.
func TestAFencedConditionalWriteSucceedsAfterAnotherClientTurnedAtomicBatchesOff(t *testing.T) {
	t.Run("OneServer", func(t *testing.T) {
		fencedWriteAfterAtomicOff(t, natstest.StartServer(t).ClientURL(), 1)
	})
	t.Run("Cluster", func(t *testing.T) {
		fencedWriteAfterAtomicOff(t, natstest.URLs(natstest.StartCluster(t)...), 3)
	})
}

func fencedWriteAfterAtomicOff(t *testing.T, url string, replicas int) {
	term := ports.WithFencingToken(t.Context(), 4)
	b, first := fencedWithFirst(t, term, natstest.Connect(t, url), Config{Bucket: "ATOMICOFF", Replicas: replicas})
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "KV_ATOMICOFF")
	if err != nil {
		t.Fatal(err)
	}
	sc := s.CachedInfo().Config
	sc.AllowAtomicPublish = false
	if info, err := js.UpdateStream(t.Context(), sc); err != nil || info.CachedInfo().Config.AllowAtomicPublish {
		t.Fatalf("turn atomic batches off: %v", err)
	}
	rev, err := b.Put(term, "k", []byte("second"), 0, &first)
	if err != nil {
		t.Fatalf("a fenced conditional write after atomic batches were turned off: %v", err)
	}
	if last, err := b.Last(t.Context(), "k"); err != nil || string(last.Value) != "second" || last.Revision != rev {
		t.Fatalf("the key holds %q at %d (%v); want %q at %d", last.Value, last.Revision, err, "second", rev)
	}
}
