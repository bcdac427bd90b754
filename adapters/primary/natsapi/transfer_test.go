package natsapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/callerauth"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// engine is one serving engine: a host, its transfer and overflow hosts,
// all owned by one instance id, serving object storage on store and any
// other services given.
type engine struct {
	owner     string
	host      *natsapi.Host
	transfers *natsapi.TransferHost
	overflow  *natsapi.OverflowHost
}

type engineOptions struct {
	host      natsapi.Options
	transfers natsapi.TransferOptions
	overflow  natsapi.OverflowOptions
}

func newEngine(t *testing.T, url string, store ports.ObjectStorage, o engineOptions, services ...natsapi.Service) *engine {
	t.Helper()
	e := &engine{owner: domain.NewInstanceID()}
	session := natstest.Connect(t, url)
	o.transfers.Owner, o.transfers.Conn = e.owner, session
	o.overflow.Owner, o.overflow.Conn = e.owner, session
	var err error
	if e.transfers, err = natsapi.NewTransferHost(o.transfers); err != nil {
		t.Fatal(err)
	}
	if e.overflow, err = natsapi.NewOverflowHost(o.overflow); err != nil {
		t.Fatal(err)
	}
	o.host.Owner, o.host.Replies, o.host.Overflow = e.owner, session, e.overflow
	o.host.Connect = func() (*nats.Conn, error) { return nats.Connect(url) }
	services = append(services, natsapi.ObjectStorage(store, e.transfers))
	if e.host, err = natsapi.NewHost(o.host, services...); err != nil {
		t.Fatal(err)
	}
	for _, serve := range []func() error{e.transfers.Serve, e.overflow.Serve, e.host.Serve} {
		if err := serve(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		e.host.Stop()
		e.transfers.Stop()
		e.overflow.Stop()
	})
	return e
}

func newObjects(t *testing.T) ports.ObjectStorage {
	t.Helper()
	store, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// gatedReader yields first, then waits for the gate before the rest, so
// a Put stays open for as long as a test needs.
type gatedReader struct {
	first, rest io.Reader
	gate        chan struct{}
	reached     chan struct{} // closed once the first part is read
	once        sync.Once
}

func newGatedReader(first, rest string) *gatedReader {
	return &gatedReader{first: strings.NewReader(first), rest: strings.NewReader(rest), gate: make(chan struct{}), reached: make(chan struct{})}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if n, err := g.first.Read(p); err != io.EOF {
		return n, err
	}
	g.once.Do(func() { close(g.reached) })
	<-g.gate
	return g.rest.Read(p)
}

// openTransfer sends a raw transfer.open, without the facade's retry.
func openTransfer(t *testing.T, nc *nats.Conn, req wire.TransferOpen, header nats.Header) (wire.SessionOpened, error) {
	t.Helper()
	body, _ := json.Marshal(req)
	msg := nats.NewMsg(wire.Subject(ports.ServiceObjectStorage, wire.OSTransferOpen))
	msg.Data = body
	for k, v := range header {
		msg.Header[k] = v
	}
	reply, err := nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		t.Fatalf("transfer.open: %v", err)
	}
	if err := wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)); err != nil {
		return wire.SessionOpened{}, err
	}
	var opened wire.SessionOpened
	if err := json.Unmarshal(reply.Data, &opened); err != nil {
		t.Fatalf("transfer.open answered %q: %v", reply.Data, err)
	}
	return opened, nil
}

// sessionCall sends one raw message of a transfer; seq < 0 sends none.
func sessionCall(nc *nats.Conn, subject string, ref wire.SessionRef, seq int64, body []byte, header nats.Header) (*nats.Msg, error) {
	msg := nats.NewMsg(subject)
	msg.Data = body
	for k, v := range header {
		msg.Header[k] = v
	}
	msg.Header.Set(wire.SessionHeader, ref.ID)
	msg.Header.Set(wire.SessionSecretHeader, ref.Secret)
	if seq >= 0 {
		msg.Header.Set(wire.SeqHeader, strconv.FormatInt(seq, 10))
	}
	reply, err := nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		return nil, err
	}
	if err := wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)); err != nil {
		return reply, err
	}
	return reply, nil
}

func transferSubject(id, op string) string {
	return wire.OwnerSubject(ports.ServiceObjectStorage, wire.OwnerOf(id), op)
}

func TestATransferOpenAtTheHandoverFinishesOnItsEngine(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newObjects(t) // a shared backend: both engines reach it
	old := newEngine(t, url, store, engineOptions{})
	client := natsclient.New(natstest.Connect(t, url))
	objects := natsclient.NewObjectStorage(client)

	first, rest := strings.Repeat("a", 200<<10), strings.Repeat("b", 300<<10)
	src := newGatedReader(first, rest)
	put := make(chan error, 1)
	go func() {
		_, err := objects.Put(t.Context(), "handover", src, ports.PutObjectOptions{})
		put <- err
	}()
	<-src.reached
	if old.transfers.Open() != 1 {
		t.Fatalf("the old engine holds %d transfers, want the one in progress", old.transfers.Open())
	}

	next := newEngine(t, url, store, engineOptions{})
	drained := make(chan bool, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := old.host.StopAccepting(ctx); err != nil {
		t.Fatal(err)
	}
	go func() {
		ok, err := natsapi.Drain(ctx, old.host, old.transfers, old.overflow)
		if err != nil {
			t.Errorf("Drain: %v", err)
		}
		drained <- ok
	}()

	for range 5 {
		opened, err := openTransfer(t, natstest.Connect(t, url), wire.TransferOpen{Mode: wire.TransferPut, Key: "new"}, nil)
		if err != nil {
			t.Fatalf("a new open after the handover: %v", err)
		}
		if wire.OwnerOf(opened.ID) != next.owner {
			t.Fatalf("a new open went to %s, want the next engine %s", wire.OwnerOf(opened.ID), next.owner)
		}
	}
	select {
	case <-drained:
		t.Fatalf("the old engine finished draining with a transfer in progress")
	case <-time.After(100 * time.Millisecond):
	}

	close(src.gate)
	if err := <-put; err != nil {
		t.Fatalf("the transfer open at the handover: %v", err)
	}
	if ok := <-drained; !ok {
		t.Fatalf("the old engine did not finish before the deadline")
	}
	r, info, err := objects.Get(t.Context(), "handover", ports.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil || string(got) != first+rest || info.Size != int64(len(first+rest)) {
		t.Fatalf("read back %d bytes (size %d), %v; want the %d written", len(got), info.Size, err, len(first+rest))
	}
}

func TestAStuckTransferIsClosedAtTheDrainDeadline(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	objs := newObjects(t)
	e := newEngine(t, url, objs, engineOptions{})
	nc := natstest.Connect(t, url)
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "stuck"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionWrite), opened.Ref(), 0, []byte("half"), nil); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if ok, err := natsapi.Drain(ctx, e.host, e.transfers, e.overflow); ok || err != nil {
		t.Fatalf("Drain = %v, %v; want unfinished at the deadline", ok, err)
	}
	if e.transfers.Open() != 0 {
		t.Fatalf("%d transfers still open after the drain deadline", e.transfers.Open())
	}
	_, err = sessionCall(nc, transferSubject(opened.ID, wire.SessionWrite), opened.Ref(), 1, []byte("rest"), nil)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a write after the drain deadline: %v, want no responders", err)
	}
	if _, err := objs.Stat(t.Context(), "stuck"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("the stuck upload left an object: %v", err)
	}
}

func TestATransfersSessionCallsAreNeverRetried(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	objs := newObjects(t)
	e := newEngine(t, url, objs, engineOptions{})
	objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))
	src := newGatedReader("first chunk", "never sent")
	put := make(chan error, 1)
	go func() {
		_, err := objects.Put(t.Context(), "k", src, ports.PutObjectOptions{})
		put <- err
	}()
	<-src.reached
	e.transfers.Stop() // the engine is gone for this transfer
	start := time.Now()
	close(src.gate)
	err := <-put
	if !errors.Is(err, wire.ErrUnavailable) || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a write to a stopped transfer host: %v, want no responders", err)
	}
	if took := time.Since(start); took >= natsclient.RetryFirst*4 {
		t.Fatalf("the write failed after %v: it was retried", took)
	}
	// The open, on the queue group, is retried: a transfer host that
	// serves again takes it.
	if err := e.transfers.Serve(); err != nil {
		t.Fatal(err)
	}
	if _, err := objects.Put(t.Context(), "k", strings.NewReader("again"), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("a Put once the transfers serve again: %v", err)
	}
	for subject, want := range map[string]bool{
		wire.Subject(ports.ServiceObjectStorage, wire.OSTransferOpen): true,
		wire.OverflowOpenSubject:                         true,
		transferSubject(e.owner+":x", wire.SessionWrite): false,
		transferSubject(e.owner+":x", wire.SessionRead):  false,
		wire.OverflowSubject(e.owner, wire.SessionRead):  false,
	} {
		if got := natsclient.Retryable(subject); got != want {
			t.Errorf("Retryable(%q) = %v, want %v", subject, got, want)
		}
	}
}

func TestAnotherCallerCannotUseATransfer(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	secret := []byte("caller-secret")
	objs := newObjects(t)
	if _, err := objs.Put(t.Context(), "mine", strings.NewReader("private"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	newEngine(t, url, objs, engineOptions{
		host:      natsapi.Options{CallerSecret: secret},
		transfers: natsapi.TransferOptions{CallerSecret: secret},
		overflow:  natsapi.OverflowOptions{CallerSecret: secret},
	})
	nc := natstest.Connect(t, url)
	token := func(caller string) nats.Header {
		tok, err := callerauth.Sign(secret, caller, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return nats.Header{wire.AuthHeader: {tok}}
	}
	alice, bob := token("alice"), token("bob")
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "mine"}, alice)
	if err != nil {
		t.Fatal(err)
	}
	read := transferSubject(opened.ID, wire.SessionRead)
	for name, c := range map[string]struct {
		ref    wire.SessionRef
		header nats.Header
	}{
		"another caller with the secret": {opened.Ref(), bob},
		"the caller without the secret":  {wire.SessionRef{ID: opened.ID, Secret: "guess"}, alice},
		"another id":                     {wire.SessionRef{ID: opened.ID + "0", Secret: opened.Secret}, alice},
	} {
		if _, err := sessionCall(nc, read, c.ref, 0, nil, c.header); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("%s: read got %v, want 404", name, err)
		}
	}
	if _, err := sessionCall(nc, read, opened.Ref(), 0, nil, nil); !errors.Is(err, wire.ErrUnauthorized) {
		t.Errorf("an unsigned read got %v, want 401", err)
	}
	reply, err := sessionCall(nc, read, opened.Ref(), 0, nil, alice)
	if err != nil || string(reply.Data) != "private" || reply.Header.Get(wire.DoneHeader) != "1" {
		t.Fatalf("the caller that opened it read %q, %v", reply.Data, err)
	}
}

func TestTransferLimitsGiveClearErrors(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	objs := newObjects(t)
	e := newEngine(t, url, objs, engineOptions{transfers: natsapi.TransferOptions{MaxOpen: 2, MaxOpenPerCaller: 2, Idle: time.Second, ChunkSize: 1024}})
	nc := natstest.Connect(t, url)

	var open []wire.SessionOpened
	for range 2 {
		opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, opened)
	}
	if _, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}, nil); !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "2 transfers are open") {
		t.Fatalf("a third open: %v, want 503 saying 2 transfers are open", err)
	}

	write := transferSubject(open[0].ID, wire.SessionWrite)
	if _, err := sessionCall(nc, write, open[0].Ref(), 0, make([]byte, 1025), nil); !errors.Is(err, ports.ErrTooLarge) || !strings.Contains(err.Error(), "the most is 1024") {
		t.Fatalf("a chunk over the chunk size: %v, want 413 naming the size", err)
	}
	if _, err := sessionCall(nc, write, open[0].Ref(), 4, []byte("x"), nil); !errors.Is(err, ports.ErrConflict) || !strings.Contains(err.Error(), "write seq 4, want 0 to 3") {
		t.Fatalf("a write past the window: %v, want 409 naming the sequence", err)
	}
	for range 2 { // the same chunk sent twice is held once
		if _, err := sessionCall(nc, write, open[0].Ref(), 0, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sessionCall(nc, write, open[0].Ref(), -1, []byte("x"), nil); !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), wire.SeqHeader) {
		t.Fatalf("a write without a sequence number: %v, want 400 naming %s", err, wire.SeqHeader)
	}
	commit := transferSubject(open[0].ID, wire.SessionCommit)
	if _, err := sessionCall(nc, commit, open[0].Ref(), -1, []byte(`{"chunks":2}`), nil); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("a commit of more chunks than written: %v, want 409", err)
	}
	reply, err := sessionCall(nc, commit, open[0].Ref(), -1, []byte(`{"chunks":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var info wire.ObjectInfo
	if err := json.Unmarshal(reply.Data, &info); err != nil || info.Size != 1 {
		t.Fatalf("commit answered %s, %v", reply.Data, err)
	}

	// Left idle, both transfers close; a later call finds nothing.
	waitFor(t, func() bool { return e.transfers.Open() == 0 })
	if _, err := sessionCall(nc, write, open[1].Ref(), 0, []byte("x"), nil); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("a write to an expired transfer: %v, want 404", err)
	}
	if _, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}, nil); err != nil {
		t.Fatalf("an open once the idle transfers closed: %v", err)
	}

	if _, err := natsapi.NewTransferHost(natsapi.TransferOptions{Owner: e.owner, Conn: nc, ChunkSize: int(nc.MaxPayload())}); err == nil {
		t.Fatalf("a chunk size of the whole max payload was accepted")
	}
	if _, err := natsapi.NewTransferHost(natsapi.TransferOptions{Owner: e.owner, Conn: nc, Window: -1}); err == nil || !strings.Contains(err.Error(), "a window of -1") {
		t.Fatalf("a negative window: %v, want an error naming it", err)
	}
	if _, err := natsapi.NewTransferHost(natsapi.TransferOptions{Owner: e.owner, Conn: nc, Window: wire.MaxTransferWindow + 1}); err == nil || !strings.Contains(err.Error(), "the most is 16") {
		t.Fatalf("a window of 17: %v, want an error naming the most", err)
	}
}

// Abi-Seq is a plain decimal number: 0, 1, 2. A sign or a leading zero
// ("+0", "-0", "00") is a malformed header, a 400 that takes no chunk,
// rather than chunk 0 under another spelling.
func TestASequenceNumberNotWrittenPlainIsABadRequest(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	objs := newObjects(t)
	newEngine(t, url, objs, engineOptions{})
	nc := natstest.Connect(t, url)
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	subject := transferSubject(opened.ID, wire.SessionWrite)
	for _, seq := range []string{"+0", "-0", "00", "+1", "01"} {
		msg := nats.NewMsg(subject)
		msg.Data = []byte("wrong")
		msg.Header.Set(wire.SessionHeader, opened.ID)
		msg.Header.Set(wire.SessionSecretHeader, opened.Secret)
		msg.Header.Set(wire.SeqHeader, seq)
		reply, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code, text := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader); code != "400" || !strings.Contains(text, wire.SeqHeader) {
			t.Errorf("a write with %s %q answered %q %q, want 400 naming the header", wire.SeqHeader, seq, code, text)
		}
	}
	if err := write(t, nc, opened, 0, "right"); err != nil {
		t.Fatal(err)
	}
	if _, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionCommit), opened.Ref(), -1, []byte(`{"chunks":1}`), nil); err != nil {
		t.Fatalf("commit: %v", err)
	}
	r, _, err := objs.Get(t.Context(), "k", ports.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := io.ReadAll(r); err != nil || string(got) != "right" {
		t.Fatalf("the object holds %q (%v), want the chunk written with a plain sequence number", got, err)
	}
}

// write sends chunk seq of an upload and checks the answer names it.
func write(t *testing.T, nc *nats.Conn, opened wire.SessionOpened, seq int64, data string) error {
	t.Helper()
	reply, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionWrite), opened.Ref(), seq, []byte(data), nil)
	if err != nil {
		return err
	}
	var ack wire.ChunkAck
	if err := json.Unmarshal(reply.Data, &ack); err != nil || ack.Seq != seq {
		t.Fatalf("write %d answered %s (%v)", seq, reply.Data, err)
	}
	return nil
}

func TestAnUploadHoldsChunksThatComeBeforeTheirTurnWithinItsWindow(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	objs := newObjects(t)
	newEngine(t, url, objs, engineOptions{transfers: natsapi.TransferOptions{ChunkSize: 4}})
	nc := natstest.Connect(t, url)
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if opened.Window != natsapi.DefaultTransferWindow {
		t.Fatalf("an upload opened with a window of %d, want %d", opened.Window, natsapi.DefaultTransferWindow)
	}
	// Chunks 3, 2 and 1 come first, 2 twice: each is answered at once.
	for _, c := range []struct {
		seq  int64
		data string
	}{{3, "dddd"}, {2, "cccc"}, {1, "bbbb"}, {2, "cccc"}} {
		if err := write(t, nc, opened, c.seq, c.data); err != nil {
			t.Fatalf("chunk %d before its turn: %v", c.seq, err)
		}
	}
	if err := write(t, nc, opened, 4, "eeee"); !errors.Is(err, ports.ErrConflict) || !strings.Contains(err.Error(), "write seq 4, want 0 to 3") {
		t.Fatalf("chunk 4 while 0 is missing: %v, want 409 naming the window", err)
	}
	commit := transferSubject(opened.ID, wire.SessionCommit)
	for _, chunks := range []string{`{"chunks":0}`, `{"chunks":4}`} {
		if _, err := sessionCall(nc, commit, opened.Ref(), -1, []byte(chunks), nil); !errors.Is(err, ports.ErrConflict) || !strings.Contains(err.Error(), "0 in order and 3 ahead") {
			t.Fatalf("commit %s while chunk 0 is missing: %v, want 409", chunks, err)
		}
	}
	// Chunk 0 fills the gap: the held chunks follow it in order, and the
	// window moves on past them.
	for seq, data := range []string{"aaaa", "bbbb", "cccc", "dddd", "eeee"} {
		if err := write(t, nc, opened, int64(seq), data); err != nil {
			t.Fatalf("chunk %d: %v", seq, err)
		}
	}
	reply, err := sessionCall(nc, commit, opened.Ref(), -1, []byte(`{"chunks":5}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var info wire.ObjectInfo
	if err := json.Unmarshal(reply.Data, &info); err != nil || info.Size != 20 {
		t.Fatalf("commit answered %s, %v", reply.Data, err)
	}
	r, _, err := objs.Get(t.Context(), "k", ports.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := io.ReadAll(r); err != nil || string(got) != "aaaabbbbccccddddeeee" {
		t.Fatalf("the object holds %q (%v)", got, err)
	}
}

// read sends one read of a download and returns its chunk and whether it
// is the last.
func read(t *testing.T, nc *nats.Conn, opened wire.SessionOpened, seq int64) (string, bool, error) {
	t.Helper()
	reply, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionRead), opened.Ref(), seq, nil, nil)
	if err != nil {
		return "", false, err
	}
	if got := reply.Header.Get(wire.SeqHeader); got != strconv.FormatInt(seq, 10) {
		t.Fatalf("read %d answered chunk %q", seq, got)
	}
	return string(reply.Data), reply.Header.Get(wire.DoneHeader) == "1", nil
}

// A download answers a read that comes before its turn, within its
// window, by reading on to it; it keeps a window of chunks behind the
// newest read, so reads that come later, or again, get theirs. Reads past
// the end are empty and say so.
func TestADownloadAnswersReadsAheadOfTheirTurnWithinItsWindow(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	objs := newObjects(t)
	newEngine(t, url, objs, engineOptions{transfers: natsapi.TransferOptions{ChunkSize: 4}})
	nc := natstest.Connect(t, url)
	if _, err := objs.Put(t.Context(), "k", strings.NewReader("aaaabbbbccccddddeeeeff"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if opened.Window != natsapi.DefaultTransferWindow {
		t.Fatalf("a download opened with a window of %d, want %d", opened.Window, natsapi.DefaultTransferWindow)
	}
	want := []string{"aaaa", "bbbb", "cccc", "dddd", "eeee", "ff"}
	for _, seq := range []int64{3, 1, 0, 2, 3, 0} { // ahead, behind, and again
		got, done, err := read(t, nc, opened, seq)
		if err != nil || got != want[seq] || done {
			t.Fatalf("read %d: %q, done %v, %v; want %q", seq, got, done, err, want[seq])
		}
	}
	// The engine has read 0 to 3: it answers 0 to 7, and keeps 0 to 3.
	if _, _, err := read(t, nc, opened, 8); !errors.Is(err, ports.ErrConflict) || !strings.Contains(err.Error(), "read seq 8, want 0 to 7") {
		t.Fatalf("read 8 past the window: %v, want 409 naming it", err)
	}
	// Read 6 reads on past the end: 5 is the last chunk, 6 is empty.
	for _, c := range []struct {
		seq  int64
		data string
		done bool
	}{{6, "", true}, {4, "eeee", false}, {5, "ff", true}, {7, "", true}} {
		got, done, err := read(t, nc, opened, c.seq)
		if err != nil || got != c.data || done != c.done {
			t.Fatalf("read %d: %q, done %v, %v; want %q, done %v", c.seq, got, done, err, c.data, c.done)
		}
	}
	// Chunk 1 has left the window the engine keeps.
	if _, _, err := read(t, nc, opened, 1); !errors.Is(err, ports.ErrConflict) || !strings.Contains(err.Error(), "want 2 to 9") {
		t.Fatalf("read 1, out of the window kept: %v, want 409 naming it", err)
	}
}

func TestAWindowOfOneTakesChunksOnlyInTurn(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	newEngine(t, url, newObjects(t), engineOptions{transfers: natsapi.TransferOptions{Window: 1}})
	nc := natstest.Connect(t, url)
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if opened.Window != 1 {
		t.Fatalf("window %d, want 1", opened.Window)
	}
	if err := write(t, nc, opened, 1, "x"); !errors.Is(err, ports.ErrConflict) || !strings.Contains(err.Error(), "write seq 1, want 0") {
		t.Fatalf("chunk 1 before 0: %v, want 409", err)
	}
	if err := write(t, nc, opened, 0, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionCommit), opened.Ref(), -1, []byte(`{"chunks":1}`), nil); err != nil {
		t.Fatal(err)
	}
	down, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "k"}, nil)
	if err != nil || down.Window != 1 {
		t.Fatalf("a download opened with %+v, %v; want a window of 1", down, err)
	}
	if _, _, err := read(t, nc, down, 1); !errors.Is(err, ports.ErrConflict) || !strings.Contains(err.Error(), "read seq 1, want 0") {
		t.Fatalf("read 1 before 0: %v, want 409", err)
	}
}

func TestEverySessionHostTakesTheEnginesInstanceID(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	objs := newObjects(t)
	e := newEngine(t, url, objs, engineOptions{}, (&big{size: 2 << 20}).service())
	nc := natstest.Connect(t, url)
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	parked := askBig(t, nc)
	for what, id := range map[string]string{"transfer": opened.ID, "overflow reply": parked.Header.Get(wire.OverflowReplyHeader)} {
		if owner := wire.OwnerOf(id); owner != e.owner || !domain.ValidInstanceID(owner) {
			t.Errorf("the %s %q is not owned by the engine %s", what, id, e.owner)
		}
	}
	if !bytes.HasPrefix([]byte(opened.ID), []byte(e.owner+":")) {
		t.Fatalf("transfer id %q", opened.ID)
	}
}

// stalledStore never takes what a Put sends until its context ends.
type stalledStore struct{ ports.ObjectStorage }

func (stalledStore) Put(ctx context.Context, _ string, _ io.Reader, _ ports.PutObjectOptions) (ports.ObjectInfo, error) {
	<-ctx.Done()
	return ports.ObjectInfo{}, ctx.Err()
}

// A caller that sends its own stalled transfer more calls than its window
// and two gets 503 for the rest at once, rather than taking more of the
// engine's hands; a close still goes through, and ends the waiting calls.
func TestATransferHasNoMoreCallsInHandThanItsWindowAndTwo(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := newEngine(t, url, stalledStore{newObjects(t)}, engineOptions{transfers: natsapi.TransferOptions{ChunkSize: 4, Window: 1}})
	nc := natstest.Connect(t, url)
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Chunk 0 goes to the feeder, which waits on the store; 1 and 2 fill
	// the queue. None of them stays in hand.
	for seq := range int64(3) {
		if err := write(t, nc, opened, seq, "abcd"); err != nil {
			t.Fatal(err)
		}
	}
	answers := make(chan *nats.Msg, 8)
	inbox := nats.NewInbox()
	if _, err := nc.ChanSubscribe(inbox, answers); err != nil {
		t.Fatal(err)
	}
	send := func(seq int64) {
		msg := nats.NewMsg(transferSubject(opened.ID, wire.SessionWrite))
		msg.Reply, msg.Data = inbox, []byte("abcd")
		msg.Header.Set(wire.SessionHeader, opened.ID)
		msg.Header.Set(wire.SessionSecretHeader, opened.Secret)
		msg.Header.Set(wire.SeqHeader, strconv.FormatInt(seq, 10))
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	// Chunk 3 waits for room in the queue, and twice more behind it: the
	// three calls a window of one has in hand.
	for range 3 {
		send(3)
	}
	send(3)
	select {
	case a := <-answers:
		err := wire.ErrorFromHeaders(a.Header.Get(wire.ErrorCodeHeader), a.Header.Get(wire.ErrorHeader))
		if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "3 calls in hand") {
			t.Fatalf("a fourth call in hand: %v, want 503 naming the three", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a fourth call in hand was not answered")
	}
	// Without the secret, the same call is the 404 of every session the
	// caller does not hold: it neither counts nor learns the calls in hand.
	if _, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionWrite), wire.SessionRef{ID: opened.ID, Secret: "guess"}, 3, []byte("abcd"), nil); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("a call without the secret to a transfer with its calls in hand: %v, want 404", err)
	}
	if _, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionClose), opened.Ref(), -1, nil, nil); err != nil {
		t.Fatalf("close: %v", err)
	}
	for range 3 {
		select {
		case a := <-answers:
			if err := wire.ErrorFromHeaders(a.Header.Get(wire.ErrorCodeHeader), a.Header.Get(wire.ErrorHeader)); !errors.Is(err, wire.ErrUnavailable) && !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("a call waiting when the transfer closed: %v, want 503 or 404", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a call waiting when the transfer closed was never answered")
		}
	}
	// The close finishes once no call holds the transfer.
	waitFor(t, func() bool { return e.transfers.Open() == 0 })
}

// A close frees what a transfer holds, so it goes through while the engine
// may not serve, when every other session call is 503.
func TestACloseGoesThroughWhileTheEngineMayNotServe(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	var may atomic.Bool
	may.Store(true)
	e := newEngine(t, url, newObjects(t), engineOptions{transfers: natsapi.TransferOptions{Admit: func() (uint64, bool) { return 0, may.Load() }}})
	nc := natstest.Connect(t, url)
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	may.Store(false)
	if err := write(t, nc, opened, 0, "x"); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("a write while the engine may not serve: %v, want 503", err)
	}
	if _, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionClose), opened.Ref(), -1, nil, nil); err != nil {
		t.Fatalf("a close while the engine may not serve: %v", err)
	}
	if open := e.transfers.Open(); open != 0 {
		t.Fatalf("%d transfers open after close", open)
	}
}

// heldStore holds each Put once it has read the whole object, and each
// Get's reader before its first byte, until the call's context ends: a
// close lands inside one store call. held gets a value when a call is
// held.
type heldStore struct {
	ports.ObjectStorage
	held chan struct{}
}

func (h heldStore) Put(ctx context.Context, _ string, r io.Reader, _ ports.PutObjectOptions) (ports.ObjectInfo, error) {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return ports.ObjectInfo{}, err
	}
	h.held <- struct{}{}
	<-ctx.Done()
	return ports.ObjectInfo{}, ctx.Err()
}

func (h heldStore) Get(ctx context.Context, key string, _ ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	return io.NopCloser(heldReader{ctx: ctx, held: h.held}), ports.ObjectInfo{Key: key, Size: 8}, nil
}

type heldReader struct {
	ctx  context.Context
	held chan struct{}
}

func (h heldReader) Read([]byte) (int, error) {
	h.held <- struct{}{}
	<-h.ctx.Done()
	return 0, h.ctx.Err()
}

// sendAsync sends one session call and returns where its answer arrives.
func sendAsync(t *testing.T, nc *nats.Conn, opened wire.SessionOpened, op string, seq int64, body []byte) <-chan error {
	t.Helper()
	answer := make(chan error, 1)
	go func() {
		_, err := sessionCall(nc, transferSubject(opened.ID, op), opened.Ref(), seq, body, nil)
		answer <- err
	}()
	return answer
}

// A commit whose Put a close cuts off may have stored the object, so it
// answers 500 "interrupted", which the caller must not send again on its
// own; a read cut off the same way did nothing, so it answers 503.
func TestACallCutOffByItsTransfersCloseSaysWhetherItMayHaveTakenEffect(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	held := make(chan struct{}, 1)
	e := newEngine(t, url, heldStore{newObjects(t), held}, engineOptions{})
	nc := natstest.Connect(t, url)
	closeAndWait := func(opened wire.SessionOpened, answer <-chan error) error {
		t.Helper()
		select {
		case <-held:
		case err := <-answer:
			t.Fatalf("the call was answered before the store held it: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("the store never got the call")
		}
		if _, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionClose), opened.Ref(), -1, nil, nil); err != nil {
			t.Fatalf("close: %v", err)
		}
		select {
		case err := <-answer:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the call cut off by the close was never answered")
			return nil
		}
	}

	t.Run("commit", func(t *testing.T) {
		opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := write(t, nc, opened, 0, "abcd"); err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(wire.TransferCommit{Chunks: 1})
		err = closeAndWait(opened, sendAsync(t, nc, opened, wire.SessionCommit, -1, body))
		if !interrupted(err) {
			t.Fatalf("a commit cut off by its transfer's close: %v, want 500 %q", err, wire.ErrInterrupted)
		}
	})
	t.Run("read", func(t *testing.T) {
		opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "k"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = closeAndWait(opened, sendAsync(t, nc, opened, wire.SessionRead, 0, nil))
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("a read cut off by its transfer's close: %v, want 503", err)
		}
	})
	// The closes finish once the calls they cut off let go.
	waitFor(t, func() bool { return e.transfers.Open() == 0 })
}

// brokenStore's Get yields the object up to a point, then fails once.
type brokenStore struct {
	ports.ObjectStorage
	at int
}

func (b brokenStore) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	r, info, err := b.ObjectStorage.Get(ctx, key, opts)
	if err != nil {
		return nil, info, err
	}
	return &brokenReader{ReadCloser: r, left: b.at}, info, nil
}

type brokenReader struct {
	io.ReadCloser
	left   int
	failed bool
}

func (b *brokenReader) Read(p []byte) (int, error) {
	if b.left == 0 && !b.failed {
		b.failed = true
		return 0, errors.New("the disk hiccupped")
	}
	if b.left > 0 {
		p = p[:min(len(p), b.left)]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= min(n, max(b.left, 0))
	return n, err
}

// A store that fails part way through a chunk has moved past what it gave
// of it: the download answers that failure to every later read, and never
// the bytes that follow as if they were the chunk. Before, with reads
// ahead, a read of that chunk again answered it shifted.
func TestADownloadWhoseStoreFailsPartWayAnswersEveryLaterReadWithTheFailure(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	objs := newObjects(t)
	if _, err := objs.Put(t.Context(), "k", strings.NewReader("aaaabbbbccccdddd"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	newEngine(t, url, brokenStore{objs, 6}, engineOptions{transfers: natsapi.TransferOptions{ChunkSize: 4}})
	nc := natstest.Connect(t, url)
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Read 3 reads on from 0: 0 is kept, 1 fails after two of its bytes.
	for _, seq := range []int64{3, 1, 2, 3, 0} {
		got, _, err := read(t, nc, opened, seq)
		var re *wire.RemoteError
		if !errors.As(err, &re) || re.Code != wire.CodeInternal {
			t.Fatalf("read %d after the store failed: %q, %v; want a 500", seq, got, err)
		}
	}
}

// describedAs is a store whose objects are described with a size other than
// the bytes they hold: a store whose stream ends early, or an object
// replaced between its description and its bytes.
type describedAs struct {
	ports.ObjectStorage
	size int64
}

func (d describedAs) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	r, info, err := d.ObjectStorage.Get(ctx, key, opts)
	info.Size = d.size
	return r, info, err
}

// A download whose bytes do not come to the size its open described fails
// where that shows, with a 500: its last chunk never reads as the end of
// an object it is not.
func TestADownloadWhoseBytesDoNotMatchItsDescriptionFails(t *testing.T) {
	for _, c := range []struct {
		name      string
		described int64
		failsAt   int64 // the chunk whose read finds it out
	}{
		{"short", 22, 4}, // 16 bytes: chunk 4 is empty, with 6 owed
		{"long", 10, 2},  // 16 bytes: chunk 2 runs past the 10th byte
	} {
		t.Run(c.name, func(t *testing.T) {
			url := natstest.StartServer(t).ClientURL()
			objs := newObjects(t)
			if _, err := objs.Put(t.Context(), "k", strings.NewReader("aaaabbbbccccdddd"), ports.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			newEngine(t, url, describedAs{objs, c.described}, engineOptions{transfers: natsapi.TransferOptions{ChunkSize: 4}})
			nc := natstest.Connect(t, url)
			opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferGet, Key: "k"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for seq := int64(0); seq < c.failsAt; seq++ {
				if _, done, err := read(t, nc, opened, seq); err != nil || done {
					t.Fatalf("read %d: done %v, %v; want a chunk", seq, done, err)
				}
			}
			got, done, err := read(t, nc, opened, c.failsAt)
			var re *wire.RemoteError
			if !errors.As(err, &re) || re.Code != wire.CodeInternal {
				t.Fatalf("read %d: %q, done %v, %v; want a 500", c.failsAt, got, done, err)
			}
		})
	}
}

// A transfer.open is for one mode: a put takes content_type, if_absent and
// if_match, a get offset and length. A field of the other mode is a 400
// naming it, and opens nothing: a download sent with if_match, or an
// upload with an offset, would otherwise run without what the caller
// asked of it.
func TestATransferOpenWithAFieldOfTheOtherModeIsABadRequestNamingIt(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newObjects(t)
	if _, err := store.Put(t.Context(), "o", strings.NewReader("hello"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	newEngine(t, url, store, engineOptions{})
	nc := natstest.Connect(t, url)
	for body, field := range map[string]string{
		`{"mode":"get","key":"o","if_match":"nope"}`:            "if_match",
		`{"mode":"get","key":"o","if_absent":true}`:             "if_absent",
		`{"mode":"get","key":"o","content_type":"text/plain"}`:  "content_type",
		`{"mode":"put","key":"o","offset":2}`:                   "offset",
		`{"mode":"put","key":"o","length":2}`:                   "length",
		`{"mode":"put","key":"o","if_absent":true,"length":0}`:  "length",
		`{"mode":"get","key":"o","offset":1,"content_type":""}`: "content_type",
	} {
		reply, err := nc.Request(wire.Subject(ports.ServiceObjectStorage, wire.OSTransferOpen), []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		code, msg := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)
		if code != "400" || !strings.Contains(msg, `"`+field+`"`) {
			t.Errorf("transfer.open %s = %s %q %s, want 400 naming %q", body, code, msg, reply.Data, field)
		}
	}
}

// A put's if_match given as "" names no ETag, and is a 400 naming it that
// opens nothing. Read as it decodes, "" was no condition at all: the put
// opened and overwrote whatever was stored, where its caller (one whose
// ETag came out empty) asked to write only over one version. The HTTP API
// refuses an empty If-Match on an object's PUT for the same reason.
func TestAnUploadWhoseIfMatchIsEmptyIsABadRequestAndOpensNothing(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newObjects(t)
	if _, err := store.Put(t.Context(), "o", strings.NewReader("hello"), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	newEngine(t, url, store, engineOptions{})
	nc := natstest.Connect(t, url)
	for _, body := range []string{
		`{"mode":"put","key":"o","if_match":""}`,
		`{"mode":"put","key":"o","content_type":"text/plain","if_match":""}`,
	} {
		reply, err := nc.Request(wire.Subject(ports.ServiceObjectStorage, wire.OSTransferOpen), []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		code, msg := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)
		if code != "400" || !strings.Contains(msg, `"if_match"`) {
			t.Errorf("transfer.open %s = %s %q %s, want 400 naming \"if_match\"", body, code, msg, reply.Data)
		}
	}
	r, _, err := store.Get(t.Context(), "o", ports.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := io.ReadAll(r); err != nil || string(got) != "hello" {
		t.Fatalf("the object holds %q (%v), want it as it was", got, err)
	}
}
