package natsapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// big is a service whose one operation answers size bytes, more than one
// message holds, once released when release is set.
type big struct {
	size    int
	release chan struct{}
}

const bigSubject = "abi.svc.big.v1.get"

func (b *big) service() natsapi.Service {
	return natsapi.Service{Name: "big", Endpoints: []natsapi.Endpoint{{Name: "get", Handler: func(ctx context.Context, _ *natsapi.Call) ([]byte, error) {
		if b.release != nil {
			select {
			case <-b.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return bigValue(b.size), nil
	}}}}
}

func bigValue(n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(i * 7)
	}
	return v
}

// askBig asks for the big answer, saying it can take an overflow reply.
func askBig(t *testing.T, nc *nats.Conn) *nats.Msg {
	t.Helper()
	msg := nats.NewMsg(bigSubject)
	msg.Header.Set(wire.OverflowHeader, "1")
	reply, err := nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)); err != nil {
		t.Fatalf("the big call: %v", err)
	}
	if reply.Header.Get(wire.OverflowReplyHeader) == "" || len(reply.Data) != 0 {
		t.Fatalf("the big call answered %d bytes, headers %v; want a parked reply", len(reply.Data), reply.Header)
	}
	return reply
}

// fetchParked reads a parked reply chunk by chunk and closes it.
func fetchParked(nc *nats.Conn, reply *nats.Msg) ([]byte, error) {
	id := reply.Header.Get(wire.OverflowReplyHeader)
	ref := wire.SessionRef{ID: id, Secret: reply.Header.Get(wire.OverflowSecretHeader)}
	owner := wire.OwnerOf(id)
	var out []byte
	for seq := int64(0); ; seq++ {
		msg, err := sessionCall(nc, wire.OverflowSubject(owner, wire.SessionRead), ref, seq, nil, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, msg.Data...)
		if msg.Header.Get(wire.DoneHeader) == "1" {
			break
		}
	}
	if size := reply.Header.Get(wire.OverflowSizeHeader); size != strconv.Itoa(len(out)) {
		return nil, errors.New("size " + size + ", read " + strconv.Itoa(len(out)))
	}
	_, err := sessionCall(nc, wire.OverflowSubject(owner, wire.SessionClose), ref, -1, nil, nil)
	return out, err
}

func TestALargeReplyIsParkedOnlyForCallsThatCanFetchIt(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	b := &big{size: 3 << 20}
	e := newEngine(t, url, newObjects(t), engineOptions{}, b.service())
	nc := natstest.Connect(t, url)

	reply, err := nc.Request(bigSubject, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get(wire.ErrorCodeHeader); code != "413" || !bytes.Contains([]byte(reply.Header.Get(wire.ErrorHeader)), []byte(wire.OverflowHeader)) {
		t.Fatalf("a big reply to a call without %s: code %q %q, want 413 naming the header", wire.OverflowHeader, code, reply.Header.Get(wire.ErrorHeader))
	}
	parked := askBig(t, nc)
	got, err := fetchParked(nc, parked)
	if err != nil || !bytes.Equal(got, bigValue(b.size)) {
		t.Fatalf("fetched %d bytes, %v; want the %d answered", len(got), err, b.size)
	}
	if e.overflow.Open() != 0 {
		t.Fatalf("%d overflow sessions open after the close", e.overflow.Open())
	}
}

// A parked reply must be fetched within the idle time and UploadIdle a
// chunk of being parked. Each read used to start its idle time again, so
// callers that read a chunk now and then held the engine's whole budget
// for as long as they liked, and a bystander's call ran and was then
// refused 413, its answer thrown away. A read past that time is 404 and
// frees the reply's bytes.
func TestAParkedReplyReadAgainAndAgainIsFreed(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	// The first read must come within UploadIdle of the parking: a
	// second leaves room for a loaded machine between the call's answer
	// and that read.
	idle, uploadIdle := 2*time.Second, time.Second
	b := &big{size: 2 << 20}
	e := newEngine(t, url, newObjects(t), engineOptions{overflow: natsapi.OverflowOptions{
		Idle: idle, UploadIdle: uploadIdle, MaxValue: 2 << 20, MaxParked: 4 << 20,
	}}, b.service())
	read := wire.OverflowSubject(e.owner, wire.SessionRead)
	type holder struct {
		nc  *nats.Conn
		ref wire.SessionRef
		err error
	}
	var hs []*holder
	for range 2 {
		nc := natstest.Connect(t, url)
		reply := askBig(t, nc)
		h := &holder{nc: nc, ref: wire.SessionRef{ID: reply.Header.Get(wire.OverflowReplyHeader), Secret: reply.Header.Get(wire.OverflowSecretHeader)}}
		// The first read comes at once, as a caller that still waits
		// makes it: a reply not asked for within UploadIdle is freed.
		if _, err := sessionCall(nc, read, h.ref, 0, nil, nil); err != nil {
			t.Fatalf("the first read of a parked reply: %v", err)
		}
		hs = append(hs, h)
	}
	// Each reads its first chunk again every fifth of the idle time, well
	// before the idle closes it, until the engine refuses a read.
	limit := 2 * (idle + 8*uploadIdle) // the idle time and UploadIdle a chunk, twice over
	deadline := time.Now().Add(limit)
	for held := len(hs); held > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d parked replies read every %v are still read after %v and hold %d bytes",
				held, idle/5, limit, e.overflow.Parked())
		}
		time.Sleep(idle / 5)
		for _, h := range hs {
			if h.err == nil {
				if _, h.err = sessionCall(h.nc, read, h.ref, 0, nil, nil); h.err != nil {
					held--
				}
			}
		}
	}
	for _, h := range hs {
		if !errors.Is(h.err, ports.ErrNotFound) || !strings.Contains(h.err.Error(), "fetched within") {
			t.Fatalf("a parked reply read too late: %v, want 404 saying when it is fetched", h.err)
		}
	}
	if parked := e.overflow.Parked(); parked != 0 {
		t.Fatalf("the refused replies still hold %d bytes", parked)
	}
	askBig(t, natstest.Connect(t, url))
}

func TestOverflowLimitsGiveClearErrors(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	b := &big{size: 3 << 20}
	e := newEngine(t, url, newObjects(t), engineOptions{overflow: natsapi.OverflowOptions{MaxValue: 2 << 20, Idle: time.Second}}, b.service())
	nc := natstest.Connect(t, url)
	msg := nats.NewMsg(bigSubject)
	msg.Header.Set(wire.OverflowHeader, "1")
	reply, err := nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get(wire.ErrorCodeHeader); code != "413" {
		t.Fatalf("a reply over the most a session holds: code %q %q, want 413", code, reply.Header.Get(wire.ErrorHeader))
	}
	b.size = 1 << 20
	parked := askBig(t, nc)
	waitFor(t, func() bool { return e.overflow.Open() == 0 }) // left idle, it closes
	if _, err := fetchParked(nc, parked); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("a read of an expired reply: %v, want 404", err)
	}
}

// Drain waits twice: a call answered during the first wait parks its
// reply on an overflow host that had already been waited for.
func TestDrainWaitsForAReplyParkedDuringTheFirstWait(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	b := &big{size: 2 << 20, release: make(chan struct{})}
	e := newEngine(t, url, newObjects(t), engineOptions{}, b.service())
	nc := natstest.Connect(t, url)
	replies := make(chan *nats.Msg, 1)
	go func() {
		msg := nats.NewMsg(bigSubject)
		msg.Header.Set(wire.OverflowHeader, "1")
		reply, err := nc.RequestMsg(msg, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		replies <- reply
	}()
	waitFor(t, func() bool { return e.host.InFlight() == 1 })

	drained := make(chan bool, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// The overflow host first: it has no session when first waited for.
		ok, err := natsapi.Drain(ctx, e.overflow, e.transfers, e.host)
		if err != nil {
			t.Error(err)
		}
		drained <- ok
	}()
	waitFor(t, func() bool { return !e.host.Serving() })
	time.Sleep(100 * time.Millisecond) // let the first wait reach the host
	close(b.release)
	reply := <-replies
	if reply == nil || reply.Header.Get(wire.OverflowReplyHeader) == "" {
		t.Fatalf("the call answered during the drain was not parked: %v", reply)
	}
	time.Sleep(200 * time.Millisecond) // a caller slower than the host's wait
	got, err := fetchParked(nc, reply)
	if err != nil || !bytes.Equal(got, bigValue(b.size)) {
		t.Fatalf("fetched %d bytes of the parked reply during the drain, %v", len(got), err)
	}
	if ok := <-drained; !ok {
		t.Fatalf("the drain did not finish once the reply was fetched")
	}
}

// An uploaded request is the engine's that holds it: another engine
// refuses it with 503 and does nothing, and the facade uploads again.
func TestAnUploadedRequestIsTakenOnlyByItsEngine(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	kv := newMemoryKV(t)
	old := newEngine(t, url, newObjects(t), engineOptions{}, natsapi.KeyValue(kv))
	nc := natstest.Connect(t, url)
	body := []byte(`{"key":"k","value":"aGk="}`)
	reply, err := nc.Request(wire.OverflowOpenSubject, []byte(`{"size":`+strconv.Itoa(len(body))+`}`), 5*time.Second)
	if err != nil || reply.Header.Get(wire.ErrorCodeHeader) != "" {
		t.Fatalf("open an upload: %v %v", err, reply.Header)
	}
	var up wire.SessionOpened
	if err := json.Unmarshal(reply.Data, &up); err != nil || wire.OwnerOf(up.ID) != old.owner {
		t.Fatalf("upload %s, %v; want one owned by %s", reply.Data, err, old.owner)
	}
	write := wire.OverflowSubject(old.owner, wire.SessionWrite)
	if _, err := sessionCall(nc, write, up.Ref(), 0, append(body, ' '), nil); !errors.Is(err, ports.ErrTooLarge) {
		t.Fatalf("a write past the size announced: %v, want 413", err)
	}
	if _, err := sessionCall(nc, write, up.Ref(), 0, body, nil); err != nil {
		t.Fatal(err)
	}

	newEngine(t, url, newObjects(t), engineOptions{}, natsapi.KeyValue(kv))
	if err := old.host.StopAccepting(t.Context()); err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(wire.Subject(ports.ServiceKeyValue, wire.KVSet))
	msg.Header.Set(wire.OverflowRequestHeader, up.ID)
	msg.Header.Set(wire.OverflowSecretHeader, up.Secret)
	reply, err = nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, text := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader); code != "503" || !bytes.Contains([]byte(text), []byte(old.owner)) {
		t.Fatalf("the next engine answered %q %q to another engine's upload, want 503 naming it", code, text)
	}
	if ok, _ := kv.Exists(t.Context(), "k"); ok {
		t.Fatalf("a refused call wrote")
	}
}

// A call whose large answer is ready only after the engine was fenced
// cannot park it: the fence closed the overflow host. The call was caught
// running, so it answers 500, interrupted, as any such call does; not 413,
// which tells the caller that the value itself is too large and not to
// ask again.
func TestALargeAnswerTheFenceLeavesUnparkedIsInterrupted(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	release, started := make(chan struct{}), make(chan struct{})
	svc := natsapi.Service{Name: "big", Endpoints: []natsapi.Endpoint{{Name: "get", Handler: func(context.Context, *natsapi.Call) ([]byte, error) {
		close(started)
		<-release // a store call that does not heed its context and ends after the fence
		return bigValue(3 << 20), nil
	}}}}
	e := newEngine(t, url, newObjects(t), engineOptions{}, svc)
	nc := natstest.Connect(t, url)
	answer := make(chan *nats.Msg, 1)
	failed := make(chan error, 1)
	go func() {
		msg := nats.NewMsg(bigSubject)
		msg.Header.Set(wire.OverflowHeader, "1")
		reply, err := nc.RequestMsg(msg, 10*time.Second)
		if err != nil {
			failed <- err
			return
		}
		answer <- reply
	}()
	<-started
	for _, fence := range []func() func(){e.host.Fence, e.transfers.Fence, e.overflow.Fence} {
		fence()()
	}
	close(release)
	select {
	case err := <-failed:
		t.Fatalf("the call caught by the fence was not answered: %v", err)
	case reply := <-answer:
		code, text := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)
		if code != "500" || !strings.HasPrefix(text, wire.ErrInterrupted.Error()) {
			t.Fatalf("a call the fence caught with its large answer unparked was answered %s %q; want 500, interrupted", code, text)
		}
	}
}

// A fence closes every session, uploaded requests among them. A call that
// names one and reaches the engine once it serves again (as after a
// renewal late by half a lease) did nothing: it is 503, which the facades
// answer by uploading again and sending the call anew, not 400, which
// they hand their caller as its own fault. Only the id with its secret is
// told so: with another secret it is unknown, as it was before the fence.
func TestACallNamingAnUploadAFenceClosedIs503(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	s := &sizes{}
	e := newEngine(t, url, newObjects(t), engineOptions{}, s.service())
	nc := natstest.Connect(t, url)
	up := upload(t, nc, bigValue(2<<20))

	// The lease's fence, then its restore, as the serving loop does them.
	for _, fence := range []func() func(){e.host.Fence, e.transfers.Fence, e.overflow.Fence} {
		fence()()
	}
	for _, serve := range []func() error{e.transfers.Serve, e.overflow.Serve, e.host.Serve} {
		if err := serve(); err != nil {
			t.Fatal(err)
		}
	}

	call := func(secret string) *nats.Msg {
		t.Helper()
		msg := nats.NewMsg(sizesSubject)
		msg.Header.Set(wire.OverflowRequestHeader, up.ID)
		msg.Header.Set(wire.OverflowSecretHeader, secret)
		reply, err := nc.RequestMsg(msg, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return reply
	}
	if reply := call(strings.Repeat("0", len(up.Secret))); reply.Header.Get(wire.ErrorCodeHeader) != "400" {
		t.Fatalf("a call naming an upload the fence closed, with another secret, was answered %q %q; want 400",
			reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader))
	}
	if reply := call(up.Secret); reply.Header.Get(wire.ErrorCodeHeader) != "503" {
		t.Fatalf("a call naming an upload the fence closed was answered %q %q; want 503 so that it is uploaded again",
			reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader))
	}
	if n := s.calls.Load(); n != 0 {
		t.Fatalf("the call ran %d times", n)
	}
}

// upload sends body as an uploaded request and returns its session.
func upload(t *testing.T, nc *nats.Conn, body []byte) wire.SessionOpened {
	t.Helper()
	var up wire.SessionOpened
	if err := natsclient.New(nc).Call(t.Context(), wire.OverflowOpenSubject, wire.OverflowUpload{Size: int64(len(body))}, &up); err != nil {
		t.Fatal(err)
	}
	for seq, rest := int64(0), body; len(rest) > 0; seq++ {
		n := min(len(rest), up.ChunkSize)
		if _, err := sessionCall(nc, wire.OverflowSubject(wire.OwnerOf(up.ID), wire.SessionWrite), up.Ref(), seq, rest[:n], nil); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	return up
}

// sizes answers with the size of the body it was given, and refuses its
// first call as a store refuses a write of an older term when fenceFirst
// is set: 503, having done nothing.
type sizes struct {
	fenceFirst bool
	slowFence  time.Duration // how long the first call takes to be refused
	calls      atomic.Int64
}

const sizesSubject = "abi.svc.sizes.v1.put"

func (s *sizes) service() natsapi.Service {
	return natsapi.Service{Name: "sizes", Endpoints: []natsapi.Endpoint{{Name: "put", Handler: func(_ context.Context, call *natsapi.Call) ([]byte, error) {
		if s.calls.Add(1) == 1 && s.fenceFirst {
			time.Sleep(s.slowFence)
			return nil, ports.ErrFenced
		}
		return []byte(strconv.Itoa(len(call.Data))), nil
	}}}}
}

// A call that names an uploaded request holds it from when it arrives: one
// that waits in the queue for a slot longer than an upload may sit idle
// still finds its body when it runs.
func TestAnUploadedRequestWaitsInTheQueueWithItsCall(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	slow := &echo{name: "slow", release: make(chan struct{}), started: make(chan struct{}, 1)}
	// The upload must keep up a chunk every idle while it is made: a
	// second leaves room for a loaded machine.
	const idle = time.Second
	e := newEngine(t, url, newObjects(t), engineOptions{
		host:     natsapi.Options{MaxConcurrent: 1},
		overflow: natsapi.OverflowOptions{UploadIdle: idle},
	}, slow.service(), (&sizes{}).service())
	nc := natstest.Connect(t, url)
	body := bigValue(3 << 20)
	up := upload(t, nc, body)

	go func() { _, _ = ask(nc, 20*time.Second) }() // takes the one slot
	<-slow.started
	answer := make(chan *nats.Msg, 1)
	go func() {
		msg := nats.NewMsg(sizesSubject)
		msg.Header.Set(wire.OverflowRequestHeader, up.ID)
		msg.Header.Set(wire.OverflowSecretHeader, up.Secret)
		reply, err := nc.RequestMsg(msg, 20*time.Second)
		if err != nil {
			t.Error(err)
		}
		answer <- reply
	}()
	waitFor(t, func() bool { return e.host.InFlight() == 2 }) // the uploaded call waits in the queue
	time.Sleep(3 * idle)                                      // past the upload's idle time, while its call waits
	close(slow.release)
	reply := <-answer
	if reply == nil {
		return
	}
	if err := wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)); err != nil {
		t.Fatalf("an uploaded call that waited in the queue: %v; want it run with its body", err)
	}
	if got := string(reply.Data); got != strconv.Itoa(len(body)) {
		t.Fatalf("the call ran on %s bytes, want %d", got, len(body))
	}
}

// A large call the engine refuses with 503, having done nothing, is
// uploaded again and sent anew: the engine took the first upload as the
// call arrived, so the same call sent again would name an upload that is
// gone.
func TestALargeCallRefusedWith503IsUploadedAgain(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	s := &sizes{fenceFirst: true}
	newEngine(t, url, newObjects(t), engineOptions{}, s.service())
	client := natsclient.New(natstest.Connect(t, url))
	body := bigValue(2 << 20)
	var n int
	if err := client.Call(t.Context(), sizesSubject, body, &n); err != nil {
		t.Fatalf("a large call refused once with 503: %v; want it sent again and served", err)
	}
	sent, err := wire.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(sent) || s.calls.Load() != 2 {
		t.Fatalf("served on %d bytes after %d calls; want the whole body on the second", n, s.calls.Load())
	}
}

// A large call refused with 503 later than the facade's retry window after
// it began (its upload was long, or it waited in a queue) is still sent
// once more: the window of resends opens at the first refusal.
func TestALargeCallRefusedLateIsUploadedAgain(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	s := &sizes{fenceFirst: true, slowFence: natsclient.RetryWindow + 300*time.Millisecond}
	newEngine(t, url, newObjects(t), engineOptions{}, s.service())
	client := natsclient.New(natstest.Connect(t, url))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var n int
	if err := client.Call(ctx, sizesSubject, bigValue(2<<20), &n); err != nil {
		t.Fatalf("a large call refused with 503 after %v: %v (%d calls)", s.slowFence, err, s.calls.Load())
	}
}

// An uploaded request's bytes are freed before its answer is parked: the
// two never count at once against the caller's share. A call that uploads
// 3 MiB and answers 3 MiB fits a share of 5 MiB.
func TestAnUploadedCallsBytesAreFreedBeforeItsAnswerIsParked(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	echo := natsapi.Service{Name: "echoback", Endpoints: []natsapi.Endpoint{{Name: "put",
		Handler: func(_ context.Context, call *natsapi.Call) ([]byte, error) { return bytes.Clone(call.Data), nil }}}}
	e := newEngine(t, url, newObjects(t), engineOptions{overflow: natsapi.OverflowOptions{
		MaxValue: 4 << 20, MaxParked: 64 << 20, MaxParkedPerCaller: 5 << 20}}, echo)
	nc := natstest.Connect(t, url)
	body := bigValue(3 << 20)
	up := upload(t, nc, body)
	msg := nats.NewMsg("abi.svc.echoback.v1.put")
	msg.Header.Set(wire.OverflowHeader, "1")
	msg.Header.Set(wire.OverflowRequestHeader, up.ID)
	msg.Header.Set(wire.OverflowSecretHeader, up.Secret)
	reply, err := nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)); err != nil {
		t.Fatalf("a 3 MiB uploaded call answering 3 MiB, in a 5 MiB share: %v", err)
	}
	got, err := fetchParked(nc, reply)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("fetched %d bytes, %v; want the %d sent", len(got), err, len(body))
	}
	waitFor(t, func() bool { return e.overflow.Parked() == 0 })
}

// A call that names an uploaded request takes its body from the upload; a
// body of its own as well is a 400 naming the header, and the call does
// nothing: which of the two bodies the caller meant cannot be told, and
// taking the upload's would drop the other without a word. The upload is
// left as it was, and a call that names it alone still runs on it.
func TestACallNamingAnUploadThatAlsoCarriesABodyIsABadRequest(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	kv := newMemoryKV(t)
	newEngine(t, url, newObjects(t), engineOptions{}, natsapi.KeyValue(kv))
	nc := natstest.Connect(t, url)
	up := upload(t, nc, []byte(`{"key":"uploaded","value":"aGk="}`))
	call := func(body string) *nats.Msg {
		t.Helper()
		msg := nats.NewMsg(wire.Subject(ports.ServiceKeyValue, wire.KVSet))
		msg.Header.Set(wire.OverflowRequestHeader, up.ID)
		msg.Header.Set(wire.OverflowSecretHeader, up.Secret)
		msg.Data = []byte(body)
		reply, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return reply
	}
	reply := call(`{"key":"sent","value":"aGk="}`)
	if code, text := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader); code != "400" || !strings.Contains(text, wire.OverflowRequestHeader) {
		t.Fatalf("a call with both an upload and a body answered %q %q, want 400 naming %s", code, text, wire.OverflowRequestHeader)
	}
	for _, key := range []string{"sent", "uploaded"} {
		if ok, err := kv.Exists(t.Context(), key); ok || err != nil {
			t.Fatalf("a refused call wrote %q (%v)", key, err)
		}
	}
	if reply := call(""); reply.Header.Get(wire.ErrorCodeHeader) != "" {
		t.Fatalf("the call naming the upload alone: %v", reply.Header)
	}
	if ok, err := kv.Exists(t.Context(), "uploaded"); !ok || err != nil {
		t.Fatalf("the call naming the upload alone did not write its body: %v", err)
	}
}

// A parked reply whose caller gave up on the call before its answer came
// (its deadline passed while the call ran) is freed once the upload idle
// time passes without a first read: nobody will fetch it, since only the
// answer the caller no longer waits for names it. Kept for the idle time
// and the upload idle time a chunk (more than 20 minutes for a reply of
// 256 MiB), it held its caller's share of parked bytes, so that caller's
// next large answers were run and then refused 413, and a few such
// callers held the engine's whole budget. A caller that reads its reply
// at once still fetches it whole.
func TestAParkedReplyWhoseCallerGaveUpIsFreedWithoutAFirstRead(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	b := &big{size: 2 << 20, release: make(chan struct{})}
	// The idle time is far longer than the test: only the first read's
	// bound frees the reply. One reply is the caller's whole share.
	e := newEngine(t, url, newObjects(t), engineOptions{overflow: natsapi.OverflowOptions{
		Idle: time.Hour, UploadIdle: time.Second, MaxValue: 2 << 20, MaxParked: 8 << 20, MaxParkedPerCaller: 2 << 20,
	}}, b.service())
	nc := natstest.Connect(t, url)

	msg := nats.NewMsg(bigSubject)
	msg.Header.Set(wire.OverflowHeader, "1")
	if _, err := nc.RequestMsg(msg, 100*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("a call given up before its answer: %v, want a timeout", err)
	}
	// The engine runs the call on, and parks its answer for nobody.
	close(b.release)
	waitFor(t, func() bool { return e.overflow.Open() == 1 })
	deadline := time.Now().Add(15 * time.Second)
	for e.overflow.Open() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a reply parked for a caller that gave up is still parked 15 s on, holding %d bytes (upload idle time 1 s)", e.overflow.Parked())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if parked := e.overflow.Parked(); parked != 0 {
		t.Fatalf("the reply nobody fetched still holds %d bytes", parked)
	}

	// The caller's share is free for its next large answer, which it
	// fetches whole.
	got, err := fetchParked(nc, askBig(t, nc))
	if err != nil || !bytes.Equal(got, bigValue(b.size)) {
		t.Fatalf("the caller's next large answer: %d bytes, %v", len(got), err)
	}
}
