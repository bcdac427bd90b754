package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// Two handles on one bucket stand for an engine paused across a takeover
// and its successor. Once the successor has written, the paused engine's
// Put and Delete, under its older term, are refused with ErrFenced: the
// object stays as the successor left it, and the refused Put leaves no
// chunks. Before, both landed over the successor's object.
func TestAnOlderTermsPutAndDeleteAfterANewerTermWroteAreRefused(t *testing.T) {
	t.Run("OneServer", func(t *testing.T) { olderTermRefused(t, natstest.StartProcess(t, server), 1) })
	t.Run("Cluster", func(t *testing.T) { olderTermRefused(t, natstest.StartClusterProcesses(t, server), 3) })
}

func olderTermRefused(t *testing.T, url string, replicas int) {
	const bucket = "FENCED"
	c := jetstream.Config{Bucket: bucket, Replicas: replicas}
	paused, successor := open(t, url, c), open(t, url, c)
	older := ports.WithFencingToken(t.Context(), 5)
	newer := ports.WithFencingToken(t.Context(), 6)
	// More than one chunk, so a refused Put has chunks to leave behind.
	late := bytes.Repeat([]byte("late"), 100<<10)

	if _, err := paused.Put(older, "o", bytes.NewReader([]byte("before the takeover")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of the older term before the takeover: %v", err)
	}
	want, err := successor.Put(newer, "o", bytes.NewReader([]byte("the successor's")), ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of the newer term: %v", err)
	}
	if _, err := paused.Put(older, "o", bytes.NewReader(late), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Put of the older term after the newer term's: %v, want ErrFenced", err)
	}
	wantObject(t, successor, "after the older term's Put", want, "the successor's")
	if err := paused.Delete(older, "o"); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Delete of the older term after the newer term's Put: %v, want ErrFenced", err)
	}
	wantObject(t, successor, "after the older term's Delete", want, "the successor's")

	awaitChunkedObjects(t, natstest.Connect(t, url), bucket, 1, "the live object's only; the refused Put left its own")
}

// term5RefusedInTerm7sHold fails the test unless paused's late Put of "o"
// and Delete of "gone" under term 5, first, are refused with ErrFenced,
// and "o" stays term 7's object, want, written by newest.
func term5RefusedInTerm7sHold(t *testing.T, paused *jetstream.Store, first context.Context, newest *jetstream.Store, want ports.ObjectInfo, when string) {
	t.Helper()
	if _, err := paused.Put(first, "o", bytes.NewReader([]byte("late")), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Put of term 5 in term 7's hold, %s: %v, want ErrFenced", when, err)
	}
	if err := paused.Delete(first, "gone"); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Delete of term 5 in term 7's hold, %s: %v, want ErrFenced", when, err)
	}
	wantObject(t, newest, "after term 5's refused writes", want, "term 7's")
}

// wantObject fails the test unless key "o" of s is the object want with
// the content content.
func wantObject(t *testing.T, s *jetstream.Store, when string, want ports.ObjectInfo, content string) {
	t.Helper()
	r, got, err := s.Get(t.Context(), "o", ports.GetObjectOptions{})
	if err != nil {
		t.Fatalf("Get %s: %v", when, err)
	}
	b, err := io.ReadAll(r)
	_ = r.Close()
	if err != nil || string(b) != content || got.ETag != want.ETag {
		t.Fatalf("%s the object holds %q (ETag %s, %v); want the newer term's %q (ETag %s)", when, b, got.ETag, err, content, want.ETag)
	}
}

// Another client that writes the object store's config back through
// nats.go (UpdateObjectStore) leaves its stream with only the chunks' and
// the descriptions' subjects, and without atomic batches. A store that was
// already open then raises the fence of its next term all the same, and
// writes: before, the fence's records had no stream to go to, and every
// write of the new term failed as not done until the store opened again.
func TestANewTermWritesThoughAnotherClientRewroteTheObjectStoresConfig(t *testing.T) {
	url := natstest.StartProcess(t, server)
	const bucket = "REWRITTEN"
	s := open(t, url, jetstream.Config{Bucket: bucket, Replicas: 1})
	if _, err := s.Put(ports.WithFencingToken(t.Context(), 5), "o", bytes.NewReader([]byte("first term's")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of the first term: %v", err)
	}
	js, err := natsjs.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.UpdateObjectStore(t.Context(), natsjs.ObjectStoreConfig{Bucket: bucket, Replicas: 1}); err != nil {
		t.Fatalf("another client's UpdateObjectStore: %v", err)
	}
	want, err := s.Put(ports.WithFencingToken(t.Context(), 6), "o", bytes.NewReader([]byte("next term's")), ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of the next term after another client rewrote the stream's config: %v", err)
	}
	wantObject(t, s, "after the next term's Put", want, "next term's")
	if _, err := s.Put(ports.WithFencingToken(t.Context(), 5), "o", bytes.NewReader([]byte("late")), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Put of the first term after the next term's: %v, want ErrFenced", err)
	}
	wantObject(t, s, "after the first term's late Put", want, "next term's")
}

// clockFunc is a lease's clock that reads now.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// A successor that took the lease from an engine that released it holds
// the raise of the fence until its predecessor's drain is over (ADR
// 0023): until then the predecessor's Put and Delete, under the older
// term, land though the successor has written; the successor's first
// write from that time on raises the fence, and the older term is refused
// after. Before, the successor's first write raised it at once, and the
// draining engine's upload failed at its description.
func TestAHeldTermLetsTheOlderTermWriteUntilItsFirstWritePastTheHold(t *testing.T) {
	url := natstest.StartProcess(t, server)
	c := jetstream.Config{Bucket: "HELD", Replicas: 1}
	var clock atomic.Int64
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return start.Add(time.Duration(clock.Load())) }
	draining, successor := open(t, url, c), open(t, url, c)
	older := ports.WithFencingToken(t.Context(), 5)
	newer := ports.WithFencingToken(t.Context(), 6)
	late := bytes.Repeat([]byte("late"), 100<<10)

	if _, err := draining.Put(older, "gone", bytes.NewReader([]byte("to be deleted")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of the older term before the handover: %v", err)
	}
	hold := time.Minute
	successor.HoldRaise(6, start.Add(hold), clockFunc(now))
	if _, err := successor.Put(newer, "o", bytes.NewReader([]byte("the successor's")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of the newer term in its hold: %v", err)
	}
	want, err := draining.Put(older, "o", bytes.NewReader(late), ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of the older term within the newer term's hold: %v, want it stored", err)
	}
	wantObject(t, successor, "after the older term's Put in the hold", want, string(late))
	if err := draining.Delete(older, "gone"); err != nil {
		t.Fatalf("Delete of the older term within the newer term's hold: %v, want it done", err)
	}
	if _, err := successor.Stat(newer, "gone"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Stat of the object the older term deleted in the hold: %v, want ErrNotFound", err)
	}

	clock.Store(int64(hold))
	want, err = successor.Put(newer, "o", bytes.NewReader([]byte("the successor's")), ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of the newer term at the end of its hold: %v", err)
	}
	if _, err := draining.Put(older, "o", bytes.NewReader(late), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Put of the older term after the newer term's first write past its hold: %v, want ErrFenced", err)
	}
	if err := draining.Delete(older, "o"); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Delete of the older term after the newer term's first write past its hold: %v, want ErrFenced", err)
	}
	wantObject(t, successor, "after the older term's refused writes", want, "the successor's")
}

// A term whose raise is held still has its own writes checked: once a
// newer term has raised the fence, the held term's Put and Delete are
// refused with ErrFenced and the newer term's object stays.
func TestAHeldTermIsRefusedOnceANewerTermRaised(t *testing.T) {
	url := natstest.StartProcess(t, server)
	c := jetstream.Config{Bucket: "HELDOLDER", Replicas: 1}
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	held, newest := open(t, url, c), open(t, url, c)
	heldTerm := ports.WithFencingToken(t.Context(), 6)

	held.HoldRaise(6, start.Add(time.Hour), clockFunc(func() time.Time { return start }))
	if _, err := held.Put(heldTerm, "o", bytes.NewReader([]byte("the held term's")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of the held term: %v", err)
	}
	want, err := newest.Put(ports.WithFencingToken(t.Context(), 7), "o", bytes.NewReader([]byte("the newest term's")), ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of the newest term: %v", err)
	}
	if _, err := held.Put(heldTerm, "o", bytes.NewReader([]byte("late")), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Put of the held term after a newer term raised the fence: %v, want ErrFenced", err)
	}
	if err := held.Delete(heldTerm, "o"); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Delete of the held term after a newer term raised the fence: %v, want ErrFenced", err)
	}
	wantObject(t, newest, "after the held term's refused writes", want, "the newest term's")
}

// Two handovers in quick succession: the engine of term 5 released the
// lease to term 6, whose raise was held, and term 6, having written in its
// hold only, released it to term 7 before that hold ended; term 7's raise
// is held in turn. Term 6's store raises the fence to its term when it
// closes, at the end of its drain, so the engine of term 5, paused past
// its own drain, has its late Put and Delete refused within term 7's hold,
// and term 7 still writes, its object staying. Before, no store raised the
// fence past term 5 until term 7's hold ended, and the late Put landed
// over term 7's object.
func TestAnEngineOlderThanAPredecessorThatReleasedInItsHoldIsRefusedInTheNextHold(t *testing.T) {
	url := natstest.StartProcess(t, server)
	c := jetstream.Config{Bucket: "HELDTWICE", Replicas: 1}
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	frozen := clockFunc(func() time.Time { return start })
	paused, predecessor, newest := open(t, url, c), open(t, url, c), open(t, url, c)
	first := ports.WithFencingToken(t.Context(), 5)
	second := ports.WithFencingToken(t.Context(), 6)
	third := ports.WithFencingToken(t.Context(), 7)

	if _, err := paused.Put(first, "gone", bytes.NewReader([]byte("to be deleted")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of term 5 before the first handover: %v", err)
	}
	predecessor.HoldRaise(6, start.Add(time.Hour), frozen)
	if _, err := predecessor.Put(second, "o", bytes.NewReader([]byte("term 6's")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of term 6 in its hold: %v", err)
	}
	if _, err := paused.Put(first, "drained", bytes.NewReader([]byte("term 5's drain")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of term 5 in term 6's hold: %v, want it stored", err)
	}
	newest.HoldRaise(7, start.Add(time.Hour), frozen)
	if _, err := newest.Put(third, "o", bytes.NewReader([]byte("term 7's first")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of term 7 in its hold, before term 6's store closed: %v", err)
	}
	if err := predecessor.Close(); err != nil {
		t.Fatalf("Close of term 6's store: %v", err)
	}
	want, err := newest.Put(third, "o", bytes.NewReader([]byte("term 7's")), ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of term 7 in its hold, after term 6's store closed: %v", err)
	}
	term5RefusedInTerm7sHold(t, paused, first, newest, want, "after term 6's store closed")
}

// A term not taken from a release (after a lease of silence, or from a
// free lease) is told, as it begins, a hold that has already ended, and
// its store raises the fence to it at once, though it never writes an
// object and its store stays open: the engine of term 5, paused across
// the takeover of term 6, has its late Put and Delete refused within the
// hold of term 7, which term 6 released the lease to, and term 7's object
// stays. Without that raise, term 7's held writes are conditioned on the
// fence as it stands, at term 5, and term 5's late Put lands over term
// 7's object.
func TestAnEngineOlderThanAPredecessorThatNeverWroteIsRefusedInItsSuccessorsHold(t *testing.T) {
	url := natstest.StartProcess(t, server)
	const bucket = "UNHELD"
	c := jetstream.Config{Bucket: bucket, Replicas: 1}
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	frozen := clockFunc(func() time.Time { return start })
	paused, predecessor, newest := open(t, url, c), open(t, url, c), open(t, url, c)
	first := ports.WithFencingToken(t.Context(), 5)
	third := ports.WithFencingToken(t.Context(), 7)

	if _, err := paused.Put(first, "gone", bytes.NewReader([]byte("to be deleted")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of term 5 before the takeover: %v", err)
	}
	predecessor.HoldRaise(6, start, frozen)
	awaitFence(t, url, bucket, 6, nil, frozen)
	newest.HoldRaise(7, start.Add(time.Hour), frozen)
	want, err := newest.Put(third, "o", bytes.NewReader([]byte("term 7's")), ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of term 7 in its hold: %v", err)
	}
	term5RefusedInTerm7sHold(t, paused, first, newest, want, "after term 6 began")
}

// A held term's store raises the fence itself once the hold has ended on
// the clock it was given (ADR 0023): the older term's Put that comes later
// is refused though the held term wrote nothing since, and its own object, written
// in the hold, stays. Before, the fence waited for the held term's next
// write, and until then the older term's late Put landed over the object
// the held term had written.
func TestAnOlderTermsWriteAfterTheHoldEndsIsRefusedThoughTheHeldTermWroteNothingSince(t *testing.T) {
	url := natstest.StartProcess(t, server)
	const bucket = "HELDEND"
	c := jetstream.Config{Bucket: bucket, Replicas: 1}
	var clock atomic.Int64
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { return start.Add(time.Duration(clock.Load())) }
	// The store's waits for its clock: each is handed to the test, which
	// ends it once it has moved the clock.
	waits := make(chan chan time.Time, 8)
	after := func(time.Duration) <-chan time.Time {
		w := make(chan time.Time, 1)
		waits <- w
		return w
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	successor, err := jetstream.OpenOnClock(ctx, c, natstest.Connect(t, url), now, after)
	if err != nil {
		t.Fatalf("Open bucket %s: %v", bucket, err)
	}
	t.Cleanup(func() { _ = successor.Close() })
	draining := open(t, url, c)
	older := ports.WithFencingToken(t.Context(), 5)
	newer := ports.WithFencingToken(t.Context(), 6)

	hold := time.Minute
	successor.HoldRaise(6, start.Add(hold), clockFunc(now))
	want, err := successor.Put(newer, "o", bytes.NewReader([]byte("the successor's")), ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of the newer term in its hold: %v", err)
	}

	clock.Store(int64(hold))
	// Every wait the store began ends now; a wait begun after the move
	// finds the hold over on the clock.
	for done := false; !done; {
		select {
		case w := <-waits:
			w <- now()
		default:
			done = true
		}
	}
	awaitFence(t, url, bucket, 6, waits, now)
	if _, err := draining.Put(older, "o", bytes.NewReader([]byte("late")), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Put of the older term after the newer term's hold ended: %v, want ErrFenced", err)
	}
	if err := draining.Delete(older, "o"); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Delete of the older term after the newer term's hold ended: %v, want ErrFenced", err)
	}
	wantObject(t, successor, "after the older term's writes past the hold", want, "the successor's")
}

// A hold ends when the clock it was given, the lease's, reads its end,
// whatever the store's own clock reads: the lease's counts the time the
// host spent suspended, Go's stands still in a suspend. After a suspend
// as long as the hold, the held term's first write raises the fence and
// the older term is refused, where on the store's clock the hold would
// still have its whole length to run.
func TestAHoldEndsOnTheLeasesClockWhichCountsASuspend(t *testing.T) {
	url := natstest.StartProcess(t, server)
	c := jetstream.Config{Bucket: "HELDSUSPENDED", Replicas: 1}
	var suspended atomic.Int64
	lease := clockFunc(func() time.Time { return time.Now().Add(time.Duration(suspended.Load())) })
	draining, successor := open(t, url, c), open(t, url, c)
	older := ports.WithFencingToken(t.Context(), 5)
	newer := ports.WithFencingToken(t.Context(), 6)

	const hold = time.Hour
	successor.HoldRaise(6, lease.Now().Add(hold), lease)
	if _, err := successor.Put(newer, "o", bytes.NewReader([]byte("the successor's")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of the newer term in its hold: %v", err)
	}
	if _, err := draining.Put(older, "o", bytes.NewReader([]byte("drained")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of the older term within the newer term's hold: %v, want it stored", err)
	}

	suspended.Add(int64(hold))
	want, err := successor.Put(newer, "o", bytes.NewReader([]byte("the successor's")), ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of the newer term after a suspend as long as its hold: %v", err)
	}
	if _, err := draining.Put(older, "o", bytes.NewReader([]byte("late")), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Put of the older term after a suspend as long as the newer term's hold and its write: %v, want ErrFenced", err)
	}
	wantObject(t, successor, "after the older term's refused Put", want, "the successor's")
}

// The store's raise at the end of a hold waits on a timer, which runs on
// Go's clock and stands still in a suspend, so on waking it reads the
// lease's clock again: a wake before the hold has ended there raises
// nothing and waits again, and once the lease's clock reads the end the
// store raises the fence itself, though its own clock has not moved and
// the held term writes nothing.
func TestTheRaiseAtTheHoldsEndReadsTheLeasesClockEachTimeItWakes(t *testing.T) {
	url := natstest.StartProcess(t, server)
	const bucket = "HELDWAKE"
	c := jetstream.Config{Bucket: bucket, Replicas: 1}
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	var suspended atomic.Int64
	lease := clockFunc(func() time.Time { return start.Add(time.Duration(suspended.Load())) })
	waits := make(chan chan time.Time, 8)
	after := func(time.Duration) <-chan time.Time {
		w := make(chan time.Time, 1)
		waits <- w
		return w
	}
	next := func(what string) chan time.Time {
		t.Helper()
		select {
		case w := <-waits:
			return w
		case <-time.After(30 * time.Second):
			t.Fatalf("the store began no wait %s", what)
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	successor, err := jetstream.OpenOnClock(ctx, c, natstest.Connect(t, url), func() time.Time { return start }, after)
	if err != nil {
		t.Fatalf("Open bucket %s: %v", bucket, err)
	}
	t.Cleanup(func() { _ = successor.Close() })
	draining := open(t, url, c)
	older := ports.WithFencingToken(t.Context(), 5)
	newer := ports.WithFencingToken(t.Context(), 6)

	const hold = time.Hour
	successor.HoldRaise(6, start.Add(hold), lease)
	want, err := successor.Put(newer, "o", bytes.NewReader([]byte("the successor's")), ports.PutObjectOptions{})
	if err != nil {
		t.Fatalf("Put of the newer term in its hold: %v", err)
	}
	next("for the hold's end") <- start
	again := next("again after a wake before the hold's end")
	if _, err := draining.Put(older, "p", bytes.NewReader([]byte("drained")), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("Put of the older term after a wake before the hold's end: %v, want it stored", err)
	}

	suspended.Store(int64(hold))
	again <- start
	awaitFence(t, url, bucket, 6, waits, func() time.Time { return start })
	if _, err := draining.Put(older, "o", bytes.NewReader([]byte("late")), ports.PutObjectOptions{}); !errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Put of the older term after the hold ended on the lease's clock: %v, want ErrFenced", err)
	}
	wantObject(t, successor, "after the older term's refused Put", want, "the successor's")
}

// awaitFence waits, a minute at most, for the last fence record of bucket
// to hold term, and fails the test if it does not. Each wait the store
// begins meanwhile (on waits, nil for a store on Go's clock) is ended at
// the store's clock's reading, now.
func awaitFence(t *testing.T, url, bucket string, term uint64, waits <-chan chan time.Time, now func() time.Time) {
	t.Helper()
	stream := objectStream(t, natstest.Connect(t, url), bucket)
	want := strconv.FormatUint(term, 10)
	deadline := time.Now().Add(time.Minute)
	for {
		m, err := stream.GetLastMsgForSubject(t.Context(), "$O."+bucket+".=fence.15")
		if err == nil && m.Header.Get("Abi-Fence") == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the hold ended, the fence's last record is %v (%v), want it raised to term %d", m, err, term)
		}
		select {
		case w := <-waits:
			w <- now()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
