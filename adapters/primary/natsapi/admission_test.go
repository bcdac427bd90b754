package natsapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/internal/callerauth"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// flood sends n requests on subject at once, with header, and returns the
// error code of each answer ("" for success), in no order.
func flood(t *testing.T, nc *nats.Conn, subject string, header nats.Header, n int) []string {
	t.Helper()
	inbox := nats.NewInbox()
	replies := make(chan *nats.Msg, n)
	sub, err := nc.ChanSubscribe(inbox+".*", replies)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	for i := range n {
		msg := nats.NewMsg(subject)
		msg.Reply = inbox + "." + strconv.Itoa(i)
		for k, v := range header {
			msg.Header[k] = v
		}
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	return codes(t, replies, n)
}

// codes waits up to 30 s for n answers on replies and returns the error
// code of each ("" for success), in the order they came.
func codes(t *testing.T, replies <-chan *nats.Msg, n int) []string {
	t.Helper()
	got := make([]string, 0, n)
	timeout := time.After(30 * time.Second)
	for len(got) < n {
		select {
		case msg := <-replies:
			got = append(got, msg.Header.Get(wire.ErrorCodeHeader))
		case <-timeout:
			t.Fatalf("%d of %d answers in 30s", len(got), n)
		}
	}
	return got
}

// floodFrom is flood from the connection whose inbox prefix is prefix:
// every reply subject is prefix.<token>, so the engine counts the calls of
// every floodFrom with one prefix as one caller's.
func floodFrom(t *testing.T, nc *nats.Conn, prefix, subject string, header nats.Header, n int) []string {
	t.Helper()
	replies := make(chan *nats.Msg, n)
	for range n {
		msg := nats.NewMsg(subject)
		msg.Reply = prefix + "." + strings.TrimPrefix(nats.NewInbox(), "_INBOX.")
		sub, err := nc.ChanSubscribe(msg.Reply, replies)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		for k, v := range header {
			msg.Header[k] = v
		}
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	return codes(t, replies, n)
}

func count(codes []string, code string) int {
	n := 0
	for _, c := range codes {
		if c == code {
			n++
		}
	}
	return n
}

// While every slot is busy and the queue is full, unsigned calls are
// refused 401 and signed ones 503, each at once and without a goroutine of
// its own; the calls admitted before all finish once released.
func TestACallIsAdmittedBeforeItCostsAGoroutine(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	secret := []byte("a caller secret of enough bytes..")
	e := &echo{name: "a", release: make(chan struct{}), started: make(chan struct{}, 8)}
	h := newHost(t, url, natsapi.Options{CallerSecret: secret, MaxConcurrent: 2, MaxQueued: 3, MaxQueuedPerCaller: 3}, e.service())
	nc := natstest.Connect(t, url)
	token, err := callerauth.Sign(secret, "alice", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	signed := nats.Header{wire.AuthHeader: {token}}

	inbox := nats.NewInbox()
	admitted := make(chan []string, 1)
	go func() { admitted <- floodFrom(t, nc, inbox, sayer, signed, 5) }()
	for range 2 {
		<-e.started
	}
	waitFor(t, func() bool { return h.InFlight() == 5 })
	before := runtime.NumGoroutine()

	const hostile = 500
	if codes := flood(t, nc, sayer, nil, hostile); count(codes, "401") != hostile {
		t.Fatalf("unsigned calls while the engine is busy: %d of %d refused 401", count(codes, "401"), hostile)
	}
	codes := floodFrom(t, nc, inbox, sayer, signed, hostile)
	if count(codes, "503") != hostile {
		t.Fatalf("signed calls past the queue: %d of %d refused 503", count(codes, "503"), hostile)
	}
	// Each refused call would have held a goroutine until the release; a
	// few come and go in the client and the broker.
	if grown := runtime.NumGoroutine() - before; grown > 50 {
		t.Fatalf("%d goroutines more after %d refused calls", grown, 2*hostile)
	}
	close(e.release)
	if codes := <-admitted; count(codes, "") != 5 {
		t.Fatalf("the admitted calls answered %q, want 5 successes", codes)
	}
	if got := e.calls.Load(); got != 5 {
		t.Fatalf("the handler ran %d times, want only the 5 admitted", got)
	}
}

// openUpload opens an overflow upload of size bytes and returns it, or the
// error the engine answered.
func openUpload(t *testing.T, nc *nats.Conn, size int) (wire.SessionOpened, error) {
	t.Helper()
	reply, err := nc.Request(wire.OverflowOpenSubject, []byte(`{"size":`+strconv.Itoa(size)+`}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)); err != nil {
		return wire.SessionOpened{}, err
	}
	var up wire.SessionOpened
	if err := json.Unmarshal(reply.Data, &up); err != nil {
		t.Fatal(err)
	}
	return up, nil
}

// One caller's uploads take at most its share of the bytes the engine
// holds; an upload that sends nothing is released after UploadIdle, and
// another caller is served all along.
func TestACallerHoldsOnlyItsShareOfOverflowBytes(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := newEngine(t, url, newObjects(t), engineOptions{overflow: natsapi.OverflowOptions{
		// Long enough that the first upload is still held, on a loaded
		// machine, when the second is asked for.
		MaxValue: 1 << 20, MaxParked: 4 << 20, UploadIdle: 2 * time.Second,
	}})
	hostile, bystander := natstest.Connect(t, url), natstest.Connect(t, url)
	if _, err := openUpload(t, hostile, 1<<20); err != nil {
		t.Fatal(err)
	}
	_, err := openUpload(t, hostile, 1)
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "one caller holds") {
		t.Fatalf("an upload past the caller's share: %v, want 503 naming the share", err)
	}
	if _, err := openUpload(t, bystander, 1<<20); err != nil {
		t.Fatalf("another caller's upload while the first holds its share: %v", err)
	}
	// Neither sends a byte: both reservations are released.
	waitFor(t, func() bool { return e.overflow.Parked() == 0 && e.overflow.Open() == 0 })
	if _, err := openUpload(t, hostile, 1<<20); err != nil {
		t.Fatalf("an upload once the idle one was released: %v", err)
	}
}

// An upload must keep up a chunk every UploadIdle once its first
// UploadIdle has passed. A byte now and then, each before the idle time,
// would otherwise hold the whole reservation for as long as its caller
// likes: four such uploads hold the engine's whole budget and keep every
// other upload (and every large reply, refused 413 after its call ran)
// out. Each trickler is refused 400, and its bytes are freed.
func TestATricklingUploadIsClosedAndItsBytesFreed(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	idle := 600 * time.Millisecond
	e := newEngine(t, url, newObjects(t), engineOptions{overflow: natsapi.OverflowOptions{
		MaxValue: 1 << 20, MaxParked: 4 << 20, UploadIdle: idle,
	}})
	write := wire.OverflowSubject(e.owner, wire.SessionWrite)
	type trickler struct {
		nc  *nats.Conn
		up  wire.SessionOpened
		err error
	}
	var ts []*trickler
	for range 4 {
		nc := natstest.Connect(t, url)
		up, err := openUpload(t, nc, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, &trickler{nc: nc, up: up})
	}
	// Each sends a byte every quarter of the idle time, well before the
	// idle closes it, until the engine refuses one.
	deadline := time.Now().Add(10 * idle)
	for seq, open := int64(0), len(ts); open > 0; seq++ {
		if time.Now().After(deadline) {
			t.Fatalf("after %d bytes each, %d uploads sending a byte every %v still take writes and hold %d bytes",
				seq, open, idle/4, e.overflow.Parked())
		}
		time.Sleep(idle / 4)
		for _, tr := range ts {
			if tr.err == nil {
				_, tr.err = sessionCall(tr.nc, write, tr.up.Ref(), seq, []byte("x"), nil)
				if tr.err != nil {
					open--
				}
			}
		}
	}
	for _, tr := range ts {
		if !errors.Is(tr.err, ports.ErrInvalidArgument) || !strings.Contains(tr.err.Error(), "slower than") {
			t.Fatalf("a trickling upload's refused write: %v, want 400 saying it is too slow", tr.err)
		}
	}
	if parked := e.overflow.Parked(); parked != 0 {
		t.Fatalf("the refused uploads still hold %d bytes", parked)
	}
	if _, err := openUpload(t, natstest.Connect(t, url), 1<<20); err != nil {
		t.Fatalf("an upload after the tricklers were closed: %v", err)
	}
}

// The bytes of an uploaded request count against the budget until the
// call that takes them ends, not only until it is taken.
func TestAnUploadedBodyCountsUntilItsCallEnds(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	slow := &echo{name: "a", release: make(chan struct{}), started: make(chan struct{}, 1)}
	e := newEngine(t, url, newObjects(t), engineOptions{}, slow.service())
	nc := natstest.Connect(t, url)
	body := []byte(`{"any":"body"}`)
	up, err := openUpload(t, nc, len(body))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sessionCall(nc, wire.OverflowSubject(e.owner, wire.SessionWrite), up.Ref(), 0, body, nil); err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(sayer)
	msg.Header.Set(wire.OverflowRequestHeader, up.ID)
	msg.Header.Set(wire.OverflowSecretHeader, up.Secret)
	done := make(chan error, 1)
	go func() {
		_, err := nc.RequestMsg(msg, 10*time.Second)
		done <- err
	}()
	<-slow.started
	if got := e.overflow.Parked(); got != int64(len(body)) {
		t.Fatalf("while the call runs the engine counts %d bytes, want the body's %d", got, len(body))
	}
	close(slow.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return e.overflow.Parked() == 0 })
}

// One caller opens at most its share of transfers; another caller still
// opens one while it holds them.
func TestACallerHoldsOnlyItsShareOfTransfers(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	newEngine(t, url, newObjects(t), engineOptions{transfers: natsapi.TransferOptions{MaxOpen: 8}})
	hostile, bystander := natstest.Connect(t, url), natstest.Connect(t, url)
	put := wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}
	for range 2 {
		if _, err := openTransfer(t, hostile, put, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err := openTransfer(t, hostile, put, nil)
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "the most one caller holds") {
		t.Fatalf("a transfer past the caller's share: %v, want 503 naming the share", err)
	}
	if _, err := openTransfer(t, bystander, put, nil); err != nil {
		t.Fatalf("another caller's transfer: %v", err)
	}
}

// A caller that floods a busy engine holds only its share of the queue: a
// bystander's call still finds a place, waits its turn among the flood's
// and is answered. Before, the flood took every place and the bystander was
// refused 503 for as long as it lasted.
func TestAFloodingCallerLeavesOthersAPlaceInTheQueue(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	secret := []byte("a caller secret of enough bytes..")
	e := &echo{name: "a", release: make(chan struct{}), started: make(chan struct{}, 8)}
	var refused atomic.Int64
	h := newHost(t, url, natsapi.Options{
		CallerSecret: secret, MaxConcurrent: 2, MaxQueued: 8,
		OnCall: func(_, _ string, code int, _ time.Duration) {
			if code == 503 {
				refused.Add(1)
			}
		},
	}, e.service())
	nc := natstest.Connect(t, url)
	as := func(who string) nats.Header {
		token, err := callerauth.Sign(secret, who, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return nats.Header{wire.AuthHeader: {token}}
	}

	flooded := make(chan []string, 1)
	go func() { flooded <- flood(t, nc, sayer, as("flooder"), 20) }()
	// Two run, two wait (a quarter of the queue), sixteen are refused.
	waitFor(t, func() bool { return refused.Load() == 16 && h.InFlight() == 4 })
	bystander := make(chan []string, 1)
	go func() { bystander <- flood(t, nc, sayer, as("bystander"), 1) }()
	waitFor(t, func() bool { return h.InFlight() == 5 || refused.Load() > 16 })
	close(e.release)
	if codes := <-bystander; codes[0] != "" {
		t.Fatalf("the bystander's call was answered %q while another caller flooded the engine, want success", codes[0])
	}
	if codes := <-flooded; count(codes, "") != 4 || count(codes, "503") != 16 {
		t.Fatalf("the flood was answered %q, want 4 successes and 16 refusals", codes)
	}
}

// A caller that floods a busy engine from one connection, as one caller or
// posing as several by the reply subjects it gives, cannot keep another
// caller's call out nor at the back of the line: when the queue is full
// the bystander's call takes a place from the caller holding the most,
// which is refused 503, and it runs before the flood has started more than
// one call for each caller the flood poses as. Before, waiting calls ran
// in the order they came, so a caller's whole share of the queue ran
// before a bystander's call, and a flood posing as four callers filled
// the queue and had the bystander refused 503 for as long as it lasted.
func TestAFloodPosingAsManyCallersNeitherRefusesNorQueuesABystanderBehindIt(t *testing.T) {
	for _, posed := range []int{1, 4} {
		t.Run(strconv.Itoa(posed), func(t *testing.T) { floodAndBystand(t, posed) })
	}
}

func floodAndBystand(t *testing.T, posed int) {
	url := natstest.StartServer(t).ClientURL()
	e := &echo{name: "a", release: make(chan struct{}), started: make(chan struct{}, 64)}
	ran := make(chan struct{}, 1)
	polite := natsapi.Service{Name: "polite", Endpoints: []natsapi.Endpoint{{Name: "say",
		Handler: func(context.Context, *natsapi.Call) ([]byte, error) {
			ran <- struct{}{}
			return []byte("b"), nil
		}}}}
	var refused atomic.Int64
	h := newHost(t, url, natsapi.Options{
		MaxConcurrent: 2, MaxQueued: 32, // a caller waits in at most 8 places
		OnCall: func(_, _ string, code int, _ time.Duration) {
			if code == 503 {
				refused.Add(1)
			}
		},
	}, e.service(), polite)

	// One connection poses as callers of 10 calls each: each takes 8
	// places, the first its 2 slots too, and the rest are past its share.
	hostile := natstest.Connect(t, url)
	const each = 10
	answers := make(chan *nats.Msg, posed*each+1)
	for i := range posed {
		prefix := "_INBOX.posed" + strconv.Itoa(i)
		if _, err := hostile.ChanSubscribe(prefix+".*", answers); err != nil {
			t.Fatal(err)
		}
		for n := range each {
			msg := nats.NewMsg(sayer)
			msg.Reply = prefix + "." + strconv.Itoa(n)
			if err := hostile.PublishMsg(msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 2 {
		<-e.started
	}
	held := int64(2 + 8*posed)
	waitFor(t, func() bool { return int64(h.InFlight()) == held && refused.Load() == int64(posed*each)-held })
	full := held == 2+32

	bystander := natstest.Connect(t, url)
	answered := make(chan error, 1)
	go func() {
		reply, err := bystander.Request(wire.Subject("polite", "say"), nil, 60*time.Second)
		if err == nil {
			err = wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader))
		}
		answered <- err
	}()
	// The bystander's call is refused at once, or waits for a slot.
	if full {
		waitFor(t, func() bool { return int64(h.InFlight()) == held && refused.Load() == int64(posed*each)-held+1 })
	} else {
		waitFor(t, func() bool { return int64(h.InFlight()) == held+1 || refused.Load() > int64(posed*each)-held })
	}
	select {
	case err := <-answered:
		t.Fatalf("the bystander's call while one connection flooded the engine as %d callers: %v, want it run", posed, err)
	default:
	}

	// Free a slot at a time, and count the flood's calls that take one
	// before the bystander's runs.
	started := 0
	for done := false; !done; {
		select {
		case <-ran:
			done = true
			continue
		default:
		}
		if started > posed {
			t.Fatalf("%d of the flood's calls ran while the bystander's waited, want at most %d, one for each caller it posed as",
				started, posed)
		}
		e.release <- struct{}{}
		select {
		case <-ran:
			done = true
		case <-e.started:
			started++
		case <-time.After(30 * time.Second):
			t.Fatal("a freed slot was taken by no call in 30s")
		}
	}
	close(e.release)
	if err := <-answered; err != nil {
		t.Fatalf("the bystander's call: %v", err)
	}
	waitFor(t, func() bool { return h.InFlight() == 0 })
	pushed := 0
	for range posed * each {
		msg := <-answers
		if text := msg.Header.Get(wire.ErrorHeader); strings.Contains(text, "the most of any caller") {
			pushed++
		}
	}
	want := 0
	if full {
		want = 1
	}
	if pushed != want {
		t.Fatalf("%d of the flood's waiting calls were refused to make a place for the bystander's, want %d", pushed, want)
	}
}

// A call waiting for a slot when the engine stops is answered 503 at once,
// so its caller sends it again, though the call in the slot it waited for
// does not heed its context and runs on.
func TestACallWaitingForASlotIsAnswered503AsTheEngineStops(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	hold, started := make(chan struct{}), make(chan struct{}, 1)
	deaf := natsapi.Service{Name: "echo", Endpoints: []natsapi.Endpoint{{Name: "say",
		Handler: func(context.Context, *natsapi.Call) ([]byte, error) {
			started <- struct{}{}
			<-hold
			return []byte("a"), nil
		}}}}
	h := newHost(t, url, natsapi.Options{MaxConcurrent: 1}, deaf)
	defer close(hold)
	nc := natstest.Connect(t, url)
	go func() { _, _ = nc.Request(sayer, nil, time.Minute) }()
	<-started
	waiting, other := make(chan error, 1), natstest.Connect(t, url)
	go func() {
		reply, err := other.Request(sayer, nil, time.Minute)
		if err == nil {
			err = wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader))
		}
		waiting <- err
	}()
	waitFor(t, func() bool { return h.InFlight() == 2 })
	h.Fence()
	select {
	case err := <-waiting:
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("the waiting call as the engine stopped: %v, want 503", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting call was not answered in 30s after the engine stopped")
	}
}

// Every caller holds the caller secret and may sign as any name, its
// neighbours' included (the HTTP API signs as "engine <instance id> http",
// and every session id names the instance). A caller that signs as
// another's name on a connection of its own takes its own share, not the
// other's: the other's calls are not refused for it.
func TestACallerSigningAsAnothersNameDoesNotUseUpTheOthersShare(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	secret := []byte("a caller secret of enough bytes..")
	e := &echo{name: "a", release: make(chan struct{}), started: make(chan struct{}, 64)}
	var refused atomic.Int64
	h := newHost(t, url, natsapi.Options{
		CallerSecret: secret, MaxConcurrent: 2, MaxQueued: 32, // a caller waits in at most 8 places
		OnCall: func(_, _ string, code int, _ time.Duration) {
			if code == 503 {
				refused.Add(1)
			}
		},
	}, e.service())
	token, err := callerauth.Sign(secret, "engine 1234 http", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	as := nats.Header{wire.AuthHeader: {token}}

	forger := natstest.Connect(t, url)
	forged := make(chan []string, 1)
	go func() { forged <- flood(t, forger, sayer, as, 12) }()
	waitFor(t, func() bool { return h.InFlight() == 10 && refused.Load() == 2 })
	owner, own := make(chan []string, 1), natstest.Connect(t, url)
	go func() { owner <- flood(t, own, sayer, as, 1) }()
	waitFor(t, func() bool { return h.InFlight() == 11 || refused.Load() > 2 })
	close(e.release)
	if codes := <-owner; codes[0] != "" {
		t.Fatalf("the name's own call while another connection signed as it and held a caller's share: %q, want success", codes[0])
	}
	if codes := <-forged; count(codes, "") != 10 || count(codes, "503") != 2 {
		t.Fatalf("the forger's calls: %q, want 10 successes and 2 refusals", codes)
	}
}

// A call the accepting connection hands on after the engine has stopped
// (one it had read from the broker before the fence, which its drain
// still delivers) is answered 503 at once when every slot is busy: it does
// not take a waiting place the stop has already cleared, there to wait for
// a slot whose call does not heed its context.
func TestACallDeliveredAfterTheEngineStoppedIsAnswered503AtOnceThoughEverySlotIsBusy(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	hold, started := make(chan struct{}), make(chan struct{}, 1)
	inQuick, gate := make(chan struct{}, 1), make(chan struct{})
	deaf := natsapi.Service{Name: "echo", Endpoints: []natsapi.Endpoint{{Name: "say",
		Handler: func(context.Context, *natsapi.Call) ([]byte, error) {
			started <- struct{}{}
			<-hold
			return []byte("a"), nil
		},
		// The late call stops on its way in, on the subscription's
		// goroutine, until the engine has stopped, as a call the
		// connection still holds when the fence comes.
		Quick: func(_ context.Context, call *natsapi.Call) ([]byte, bool, error) {
			if string(call.Data) == "late" {
				inQuick <- struct{}{}
				<-gate
			}
			return nil, false, nil
		}}}}
	h := newHost(t, url, natsapi.Options{MaxConcurrent: 1}, deaf)
	defer close(hold)
	nc := natstest.Connect(t, url)
	go func() { _, _ = nc.Request(sayer, nil, time.Minute) }()
	<-started
	late, other := make(chan error, 1), natstest.Connect(t, url)
	go func() {
		reply, err := other.Request(sayer, []byte("late"), time.Minute)
		if err == nil {
			err = wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader))
		}
		late <- err
	}()
	<-inQuick
	h.Fence()
	close(gate)
	select {
	case err := <-late:
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("the call delivered after the engine stopped: %v, want 503", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call delivered after the engine stopped was not answered in 20s while the slot stayed busy")
	}
}

// A call of an ended term is refused at once, though every slot is busy:
// it takes no place in the queue, where it waited for a slot only to be
// refused then. So is one whose term is no number.
func TestACallOfAnEndedTermIsRefusedWithoutWaitingForASlot(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := &echo{name: "busy", release: make(chan struct{}), started: make(chan struct{}, 1)}
	newHost(t, url, natsapi.Options{MaxConcurrent: 1, Admit: func() (uint64, bool) { return 7, true }}, e.service())
	defer close(e.release)
	nc := natstest.Connect(t, url)
	go func() { _, _ = nc.Request(sayer, nil, time.Minute) }()
	<-e.started
	for term, want := range map[string]error{"5": wire.ErrUnavailable, "x": ports.ErrInvalidArgument} {
		msg := nats.NewMsg(sayer)
		msg.Header.Set(wire.TermHeader, term)
		reply, err := nc.RequestMsg(msg, 20*time.Second)
		if err == nil {
			err = wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader))
		}
		if !errors.Is(err, want) {
			t.Fatalf("a call of term %q while the one slot was busy: %v, want %v at once", term, err, want)
		}
	}
}
