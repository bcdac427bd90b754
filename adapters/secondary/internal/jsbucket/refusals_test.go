package jsbucket

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// deniedUser starts a node with two users, "ops" and "engine" (each with
// its name as password), of which "engine" may not publish to denied. It
// returns the node's URL.
func deniedUser(t *testing.T, denied ...string) string {
	t.Helper()
	return natstest.StartWith(t, &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "ops", Password: "ops"},
			{Username: "engine", Password: "engine", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Deny: denied},
			}},
		},
	}).ClientURL()
}

// stillListened reports whether a request still listens for refusals on nc.
func stillListened(nc *nats.Conn) bool {
	conns.Lock()
	l := conns.m[weak.Make(nc)]
	conns.Unlock()
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head != nil
}

// The server tells a refusal to the connection, and the refusal of the
// store's update is heard though other refusals follow it at once on the
// same connection: OpenFenced fails naming the permission, well before the
// update's request would give up. Before, the store looked at the
// connection's last error every 10 ms, which the next refusal had
// replaced by then, and it failed only at its deadline, naming none. The
// connection's own handler, the engine's log, still hears every refusal,
// and once the store is done no request listens on the connection.
func TestTheRefusalOfAnUpdateIsHeardThoughOtherRefusalsFollowItOnTheConnection(t *testing.T) {
	const update = "$JS.API.STREAM.UPDATE.KV_PLAIN"
	url := deniedUser(t, update, "elsewhere")
	js, err := jetstream.New(natstest.Connect(t, url, nats.UserInfo("ops", "ops")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), keyValueStream(Config{Bucket: "PLAIN", Replicas: 1}, "made before fences")); err != nil {
		t.Fatal(err)
	}
	logged := make(chan struct{}, 1)
	nc := natstest.Connect(t, url, nats.UserInfo("engine", "engine"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if strings.Contains(err.Error(), update) {
			select {
			case logged <- struct{}{}:
			default:
			}
		}
	}))
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if nc.Publish("elsewhere", nil) != nil || nc.Flush() != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), attemptTimeout)
	t.Cleanup(cancel)
	_, err = OpenFenced(ctx, nc, Config{Bucket: "PLAIN"}, "test")
	close(stop)
	<-stopped
	if !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), update) {
		t.Fatalf("OpenFenced: %v; want ErrPermission naming %s", err, update)
	}
	if ctx.Err() != nil {
		t.Fatalf("OpenFenced named the refusal only once its context of %v had ended", attemptTimeout)
	}
	select {
	case <-logged:
	case <-time.After(time.Minute):
		t.Fatal("the connection's own error handler never heard the refusal of the update")
	}
	if stillListened(nc) {
		t.Fatal("a store that is done still listens for the connection's errors")
	}
}

// A data call whose publish the permissions deny fails as soon as the
// server's refusal reaches the connection, naming the subject refused,
// well within a context shorter than one attempt's request (3 s): a read
// from the stream's leader, a plain write, and a fenced conditional write
// (an atomic batch), and the key holds nothing. Before, each waited out
// that request, and a write was then told of unknown outcome, with no
// ErrPermission to read.
func TestADataCallWhosePublishThePermissionsDenyFailsAtOnceNamingThePermission(t *testing.T) {
	const (
		write = "$KV.DENIED.secret"
		read  = "$JS.API.STREAM.MSG.GET.KV_UNREAD"
	)
	url := deniedUser(t, write, read)
	nc := natstest.Connect(t, url, nats.UserInfo("engine", "engine"))
	denied, err := OpenFenced(t.Context(), nc, Config{Bucket: "DENIED"}, "test")
	if err != nil {
		t.Fatalf("OpenFenced: %v", err)
	}
	unread, err := Open(t.Context(), nc, Config{Bucket: "UNREAD"}, "test")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	none := uint64(0)
	for _, c := range []struct {
		name, subject string
		call          func(ctx context.Context) error
	}{
		{"a read", read, func(ctx context.Context) error { _, err := unread.Last(ctx, "k"); return err }},
		{"a plain write", write, func(ctx context.Context) error { _, err := denied.Put(ctx, "secret", []byte("v"), 0, nil); return err }},
		{"a fenced conditional write", write, func(ctx context.Context) error {
			_, err := denied.Put(ports.WithFencingToken(ctx, 3), "secret", []byte("v"), 0, &none)
			return err
		}},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), attemptTimeout)
		err := c.call(ctx)
		late := ctx.Err()
		cancel()
		if !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), c.subject) {
			t.Errorf("%s: %v; want ErrPermission naming %s", c.name, err, c.subject)
		}
		if late != nil {
			t.Errorf("%s named the refusal only once its context of %v had ended", c.name, attemptTimeout)
		}
	}
	if stillListened(nc) {
		t.Fatal("calls that are done still listen for the connection's errors")
	}
	js, err := jetstream.New(natstest.Connect(t, url, nats.UserInfo("ops", "ops")))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), "KV_DENIED")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLastMsgForSubject(t.Context(), write); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the refused writes left a message on %s: %v", write, err)
	}
}

// heldAnswer is the JetStream client with the answer to its first publish
// held back: the message is stored, and the answer reaches the caller
// only once release is closed, unless the caller's context ended first.
// It stands for a stream slow to answer, which a test cannot cause at a
// chosen moment.
type heldAnswer struct {
	jetstream.JetStream
	once    sync.Once
	sent    chan struct{}
	release chan struct{}
}

func (h *heldAnswer) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := h.JetStream.PublishMsg(ctx, m, opts...)
	first := false
	h.once.Do(func() { first = true })
	if !first {
		return ack, err
	}
	close(h.sent)
	<-h.release
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return ack, err
}

// Two writes to one key publish to one subject, and the server's refusal
// names the subject only. When the user's permissions are reloaded to
// deny the key after write A was stored, and before write B, B's refusal
// reaches A as well while A waits for its answer. A is not taken for
// refused: it returns the revision it was stored at. Before, the refusal
// cancelled A, which was told that the permissions denied it, a write
// that stored nothing, though its value was the key's. B fails naming the
// permission once A's answer leaves the refusal no other owner.
func TestAWriteIsNotToldRefusedByTheRefusalOfAnotherWriteToItsKey(t *testing.T) {
	const (
		key       = "$KV.TWO.k"
		elsewhere = "elsewhere"
	)
	opts := &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "ops", Password: "ops"},
			{Username: "engine", Password: "engine"},
		},
	}
	srv := natstest.StartWith(t, opts)
	heard := make(chan string, 16)
	nc := natstest.Connect(t, srv.ClientURL(), nats.UserInfo("engine", "engine"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		heard <- err.Error()
	}))
	a, err := Open(t.Context(), nc, Config{Bucket: "TWO"}, "test")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	b, err := Open(t.Context(), nc, Config{Bucket: "TWO"}, "test")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	held := &heldAnswer{JetStream: a.js, sent: make(chan struct{}), release: make(chan struct{})}
	a.js = held
	// A's answer is held while the permissions are reloaded and B is
	// refused: its attempt outlasts that however busy the machine, where
	// one of 3 s, run out, would send A again into the denial.
	a.attempt = time.Minute

	type result struct {
		rev uint64
		err error
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	doneA := make(chan result, 1)
	go func() {
		rev, err := a.Put(ctx, "k", []byte("a"), 0, nil)
		doneA <- result{rev, err}
	}()
	select {
	case <-held.sent:
	case r := <-doneA:
		t.Fatalf("write A ended before it was stored: %d, %v", r.rev, r.err)
	}

	denied := *opts
	denied.Users = []*server.User{
		{Username: "ops", Password: "ops"},
		{Username: "engine", Password: "engine", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Deny: []string{key, elsewhere}},
		}},
	}
	if err := srv.ReloadOptions(&denied); err != nil {
		t.Fatalf("reload: %v", err)
	}
	doneB := make(chan result, 1)
	go func() {
		rev, err := b.Put(ctx, "k", []byte("b"), 0, nil)
		doneB <- result{rev, err}
	}()
	// The connection's handler hears each refusal before the writes
	// listening do, on one goroutine: once it hears the refusal of a
	// publish made after B's, the writes have heard B's.
	waitHeard(t, heard, key)
	if err := nc.Publish(elsewhere, nil); err != nil {
		t.Fatal(err)
	}
	waitHeard(t, heard, elsewhere)
	close(held.release)

	ra := <-doneA
	if ra.err != nil {
		t.Fatalf("write A, stored before the permissions changed: %v; want its revision", ra.err)
	}
	last, err := a.Last(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if last.Revision != ra.rev || string(last.Value) != "a" {
		t.Fatalf("the key holds %q at revision %d; write A returned revision %d", last.Value, last.Revision, ra.rev)
	}
	if rb := <-doneB; !errors.Is(rb.err, ErrPermission) {
		t.Fatalf("write B, sent after the permissions denied the key: %d, %v; want ErrPermission, once A's answer left B's the only publish in play", rb.rev, rb.err)
	}
}

// waitHeard waits for the connection's handler to hear a refusal naming
// subject.
func waitHeard(t *testing.T, heard <-chan string, subject string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case e := <-heard:
			if strings.Contains(e, `"`+subject+`"`) {
				return
			}
		case <-timeout:
			t.Fatalf("the connection never heard the refusal of %s", subject)
		}
	}
}

// A connection's handler of refusals stays for the connection's life, and
// the process forgets the connection once it is closed and collected:
// stores opened on many connections, one after the other, leave none
// behind.
func TestAClosedConnectionIsForgottenOnceCollected(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	known := func() int {
		conns.Lock()
		defer conns.Unlock()
		return len(conns.m)
	}
	before := known()
	for i := range 3 {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Open(t.Context(), nc, Config{Bucket: "GONE"}, "test")
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		if _, err := b.Put(t.Context(), "k", []byte("v"), 0, nil); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
		nc.Close()
	}
	deadline := time.Now().Add(time.Minute)
	for known() > before {
		if time.Now().After(deadline) {
			t.Fatalf("a minute after their connections closed, %d of 3 are still known", known()-before)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// A fenced conditional write is an atomic batch of two publishes, and one
// the connection would not send at all (here, over the server's
// max_payload) leaves neither in play on its key's subject. A later write
// to the key that the permissions deny then fails naming the permission
// within one attempt's time. Before, the connection counted the unsent
// batch's first publish as still awaiting its refusal, forever: no
// refusal of the key was a write's own again, and the denied write waited
// out its whole call and was told of unknown outcome.
func TestAFencedWriteTheConnectionDidNotSendLeavesLaterRefusalsOfItsKeyHeard(t *testing.T) {
	const write = "$KV.DENIED.secret"
	url := deniedUser(t, write)
	nc := natstest.Connect(t, url, nats.UserInfo("engine", "engine"))
	denied, err := OpenFenced(t.Context(), nc, Config{Bucket: "DENIED"}, "test")
	if err != nil {
		t.Fatalf("OpenFenced: %v", err)
	}
	none := uint64(0)
	ctx := ports.WithFencingToken(t.Context(), 3)
	big := make([]byte, nc.MaxPayload()+1)
	if _, err := denied.Put(ctx, "secret", big, 0, &none); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("Put over max_payload: %v; want nats.ErrMaxPayload", err)
	}
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	_, err = denied.Put(actx, "secret", []byte("v"), 0, &none)
	late := actx.Err()
	if !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), write) {
		t.Fatalf("denied Put: %v; want ErrPermission naming %s", err, write)
	}
	if late != nil {
		t.Fatalf("the denied Put named the refusal only once its context of %v had ended", attemptTimeout)
	}
}
