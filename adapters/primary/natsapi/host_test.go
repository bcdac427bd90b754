package natsapi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/callerauth"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// echo is a service whose one operation answers with the name of the host
// that ran it, after an optional delay or once released.
type echo struct {
	name    string
	delay   time.Duration
	release chan struct{} // when set, calls wait for it or their context
	started chan struct{} // when set, each call signals it has started
	calls   atomic.Int64
}

func (e *echo) service() natsapi.Service {
	return natsapi.Service{Name: "echo", Endpoints: []natsapi.Endpoint{{Name: "say", Handler: e.handle}}}
}

func (e *echo) handle(ctx context.Context, call *natsapi.Call) ([]byte, error) {
	e.calls.Add(1)
	if e.started != nil {
		e.started <- struct{}{}
	}
	if e.release != nil {
		select {
		case <-e.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if e.delay > 0 {
		select {
		case <-time.After(e.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return []byte(e.name), nil
}

const sayer = "abi.svc.echo.v1.say"

func newHost(t *testing.T, url string, opts natsapi.Options, services ...natsapi.Service) *natsapi.Host {
	t.Helper()
	opts.Owner = domain.NewInstanceID()
	opts.Connect = func() (*nats.Conn, error) { return nats.Connect(url) }
	opts.Replies = natstest.Connect(t, url)
	h, err := natsapi.NewHost(opts, services...)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}

// ask sends one raw request, without the facade's retry.
func ask(nc *nats.Conn, timeout time.Duration) (string, error) {
	msg, err := nc.Request(sayer, nil, timeout)
	if err != nil {
		return "", err
	}
	if err := wire.ErrorFromHeaders(msg.Header.Get(wire.ErrorCodeHeader), msg.Header.Get(wire.ErrorHeader)); err != nil {
		return "", err
	}
	return string(msg.Data), nil
}

func TestAQueueMemberDrainedUnderLoadLosesNoRequest(t *testing.T) {
	for run := range 5 {
		t.Run(fmt.Sprintf("run%d", run), func(t *testing.T) {
			url := natstest.StartServer(t).ClientURL()
			a := &echo{name: "a", delay: time.Millisecond}
			b := &echo{name: "b", delay: time.Millisecond}
			hostA := newHost(t, url, natsapi.Options{}, a.service())
			newHost(t, url, natsapi.Options{}, b.service())

			const requesters = 64
			var wg sync.WaitGroup
			var sent, lost atomic.Int64
			stop := make(chan struct{})
			for range requesters {
				nc := natstest.Connect(t, url)
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						sent.Add(1)
						if _, err := ask(nc, 5*time.Second); err != nil {
							lost.Add(1)
							t.Errorf("request lost: %v", err)
						}
					}
				})
			}
			time.Sleep(200 * time.Millisecond)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := hostA.StopAccepting(ctx); err != nil {
				t.Fatalf("StopAccepting: %v", err)
			}
			if err := hostA.Wait(ctx); err != nil {
				t.Fatalf("Wait: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
			close(stop)
			wg.Wait()
			if lost.Load() != 0 || a.calls.Load() == 0 || b.calls.Load() == 0 {
				t.Fatalf("%d of %d requests lost; a answered %d, b %d", lost.Load(), sent.Load(), a.calls.Load(), b.calls.Load())
			}
		})
	}
}

func TestCallsReceivedBeforeTheHandoverAreAnsweredAndNewOnesGoToTheNextEngine(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	old := &echo{name: "old", release: make(chan struct{}), started: make(chan struct{}, 2)}
	oldHost := newHost(t, url, natsapi.Options{MaxConcurrent: 1}, old.service())
	nc := natstest.Connect(t, url)

	answers := make(chan string, 2)
	for range 2 { // one runs, one waits behind it for the only slot
		go func() {
			s, err := ask(nc, 10*time.Second)
			if err != nil {
				s = "error: " + err.Error()
			}
			answers <- s
		}()
	}
	<-old.started
	waitFor(t, func() bool { return oldHost.InFlight() == 2 })

	next := &echo{name: "next"}
	newHost(t, url, natsapi.Options{}, next.service())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := oldHost.StopAccepting(ctx); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if s, err := ask(nc, 5*time.Second); err != nil || s != "next" {
			t.Fatalf("a new call after the handover: %q, %v; want the next engine", s, err)
		}
	}
	close(old.release)
	if err := oldHost.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if s := <-answers; s != "old" {
			t.Fatalf("a call received before the handover got %q, want the old engine's answer", s)
		}
	}
}

func TestACallSentWhileNoEngineServesIsAnsweredByTheNextOne(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	client := natsclient.New(natstest.Connect(t, url))
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := client.Request(ctx, sayer, nil, nil)
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // nobody serves: the facade keeps asking
	newHost(t, url, natsapi.Options{}, (&echo{name: "next"}).service())
	if err := <-got; err != nil {
		t.Fatalf("the call sent while nobody served failed: %v", err)
	}
}

func TestNobodyServingFailsAfterTheRetryWindow(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	client := natsclient.New(natstest.Connect(t, url))
	start := time.Now()
	_, err := client.Request(t.Context(), sayer, nil, nil)
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("err %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took < natsclient.RetryWindow/2 {
		t.Fatalf("gave up after %v, before the retry window", took)
	}
	// The call's own deadline wins over the window.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := client.Request(ctx, sayer, nil, nil); err == nil {
		t.Fatalf("no error with nobody serving")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("retried for %v past a 300ms deadline", took)
	}
}

func TestAnOwnerSubjectIsNeverRetried(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	client := natsclient.New(natstest.Connect(t, url))
	start := time.Now()
	_, err := client.Request(t.Context(), wire.OwnerSubject("object_storage", domain.NewInstanceID(), "read"), nil, nil)
	if !errors.Is(err, wire.ErrUnavailable) || time.Since(start) > time.Second {
		t.Fatalf("err %v after %v, want an immediate ErrUnavailable", err, time.Since(start))
	}
}

func TestACallStillRunningAtTheDrainDeadlineIsCancelled(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	stuck := &echo{name: "stuck", release: make(chan struct{}), started: make(chan struct{}, 1)}
	h := newHost(t, url, natsapi.Options{}, stuck.service())
	nc := natstest.Connect(t, url)
	got := make(chan error, 1)
	go func() {
		_, err := ask(nc, 10*time.Second)
		got <- err
	}()
	<-stuck.started
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	finished, err := natsapi.Drain(ctx, h)
	if err != nil || finished {
		t.Fatalf("Drain = %v, %v; want unfinished at the deadline", finished, err)
	}
	if err := <-got; !interrupted(err) {
		t.Fatalf("the stuck call got %v, want 500, interrupted", err)
	}
}

func TestFencingStopsTheCallsAtOnce(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	stuck := &echo{name: "stuck", release: make(chan struct{}), started: make(chan struct{}, 1)}
	h := newHost(t, url, natsapi.Options{}, stuck.service())
	nc := natstest.Connect(t, url)
	got := make(chan error, 1)
	go func() {
		_, err := ask(nc, 10*time.Second)
		got <- err
	}()
	<-stuck.started
	h.Fence()()
	if err := <-got; !interrupted(err) {
		t.Fatalf("the running call got %v, want 500, interrupted", err)
	}
	if _, err := ask(nc, time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a fenced host answered a new call: %v", err)
	}
	if err := h.Serve(); err != nil {
		t.Fatal(err)
	}
	close(stuck.release)
	if s, err := ask(nc, 5*time.Second); err != nil || s != "stuck" {
		t.Fatalf("after Serve again: %q, %v", s, err)
	}
}

// A fence ends the queue subscriptions at the broker without waiting for
// its wait: the serving loop stops the jobs before it waits, and a job
// that takes its time must not leave the fenced engine a share of the
// calls, each answered 503, meanwhile.
func TestAFenceEndsTheQueueSubscriptionsBeforeItsWait(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	h := newHost(t, url, natsapi.Options{}, (&echo{name: "e"}).service())
	nc := natstest.Connect(t, url)
	if s, err := ask(nc, 5*time.Second); err != nil || s != "e" {
		t.Fatalf("before the fence: %q, %v", s, err)
	}
	wait := h.Fence()
	defer wait()
	waitFor(t, func() bool {
		_, err := ask(nc, time.Second)
		return errors.Is(err, nats.ErrNoResponders)
	})
}

func TestAHostThatMayNotServeAnswers503(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := &echo{name: "e"}
	newHost(t, url, natsapi.Options{Admit: func() (uint64, bool) { return 0, false }}, e.service())
	if _, err := ask(natstest.Connect(t, url), 5*time.Second); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("err %v, want 503", err)
	}
	if e.calls.Load() != 0 {
		t.Fatalf("the handler ran on an engine that may not serve")
	}
}

func TestCallersMustSignWhenASecretIsSet(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	secret := []byte("caller-secret")
	e := &echo{name: "e"}
	newHost(t, url, natsapi.Options{CallerSecret: secret}, e.service())
	nc := natstest.Connect(t, url)

	expired, _ := callerauth.Sign(secret, "m", -time.Minute)
	forged, _ := callerauth.Sign([]byte("guess"), "m", time.Minute)
	for name, tok := range map[string]string{"missing": "", "expired": expired, "forged": forged} {
		msg := nats.NewMsg(sayer)
		if tok != "" {
			msg.Header.Set(wire.AuthHeader, tok)
		}
		reply, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := reply.Header.Get(wire.ErrorCodeHeader); code != "401" {
			t.Errorf("%s token: code %q, want 401", name, code)
		}
	}
	if e.calls.Load() != 0 {
		t.Fatalf("an unsigned call reached the handler")
	}
	signed := natsclient.New(nc, natsclient.WithSigner(callerauth.NewSigner(secret, "module-a")))
	if _, err := signed.Request(t.Context(), sayer, nil, nil); err != nil {
		t.Fatalf("a signed call: %v", err)
	}
}

func TestAMalformedBodyIsABadRequestNamingTheField(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newMemoryKV(t)
	newHost(t, url, natsapi.Options{}, natsapi.KeyValue(store))
	nc := natstest.Connect(t, url)
	cases := map[string]string{
		`{"key": 5}`:                `"key"`,
		`{"kye": "k"}`:              `unknown field "kye"`,
		`not json`:                  "body",
		`{"key":"k","value":"!!!"}`: "value",
		`{"key":"k"} {"key":"k"}`:   "more than one",
		`{"key":"k","value":"aGk=","ttl_seconds":-1}`: "ttl_seconds",
		`{"key":"k"}`:                `"value" is missing`,
		`{"KEY":"k","value":"aGk="}`: `unknown field "KEY"`,
		`{"key":"k","Value":"aGk="}`: `unknown field "Value"`,
		`{"key":"a","key":"k"}`:      `field "key" given twice`,
	}
	for body, want := range cases {
		reply, err := nc.Request(wire.Subject(ports.ServiceKeyValue, wire.KVSet), []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		code, msg := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)
		if code != "400" || !strings.Contains(msg, want) {
			t.Errorf("%s: %s %q, want 400 naming %s", body, code, msg, want)
		}
	}
	// The endpoint still answers after every bad call.
	if reply, err := nc.Request(wire.Subject(ports.ServiceKeyValue, wire.KVSet), []byte(`{"key":"k","value":"aGk="}`), 5*time.Second); err != nil || reply.Header.Get(wire.ErrorCodeHeader) != "" {
		t.Fatalf("a good call after bad ones: %v %v", err, reply.Header)
	}
}

// A body is one JSON value and nothing after it but white space. A stray
// closing bracket or brace after the object is malformed JSON: the call is
// a 400 and does nothing, rather than running on the object before it.
func TestAStrayBracketAfterTheBodyIsABadRequestAndStoresNothing(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newMemoryKV(t)
	newHost(t, url, natsapi.Options{}, natsapi.KeyValue(store))
	nc := natstest.Connect(t, url)
	for _, tail := range []string{"]", "}", " ]]", "\n}"} {
		body := `{"key":"k","value":"aGk="}` + tail
		reply, err := nc.Request(wire.Subject(ports.ServiceKeyValue, wire.KVSet), []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if code, msg := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader); code != "400" || !strings.Contains(msg, "after the JSON value") {
			t.Errorf("%q answered %q %q, want 400 saying what follows the JSON value", body, code, msg)
		}
		if ok, err := store.Exists(t.Context(), "k"); err != nil || ok {
			t.Fatalf("after %q the key exists (%v, %v): a malformed body was stored", body, ok, err)
		}
	}
}

// A string that is not UTF-8, by a byte outside it or by an escaped
// surrogate half without its pair, is a 400 naming the field. encoding/json
// alone reads either as U+FFFD, so "a\xff" and "a\ud800" would both be the
// key "a\ufffd": a caller would write over a key it never named.
func TestAKeyThatIsNotUTF8IsABadRequestNotAnotherKey(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newMemoryKV(t)
	newHost(t, url, natsapi.Options{}, natsapi.KeyValue(store))
	nc := natstest.Connect(t, url)
	for _, key := range []string{"a\xff", `a\ud800`, `a\udc00`, `a\ud800\u0041`, "\xc3(", "\xed\xa0\x80"} {
		body := `{"key":"` + key + `","value":"aGk="}`
		reply, err := nc.Request(wire.Subject(ports.ServiceKeyValue, wire.KVSet), []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if code, msg := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader); code != "400" || !strings.Contains(msg, `field "key" is not UTF-8`) {
			t.Errorf("%q answered %q %q, want 400 naming the field", body, code, msg)
		}
	}
	if keys, _, err := store.ListKeys(t.Context(), "", 100, ""); err != nil || len(keys) != 0 {
		t.Fatalf("the store holds %q (%v): a key that is not UTF-8 was stored as another", keys, err)
	}
	// A surrogate pair, escaped, is one character, and is taken.
	reply, err := nc.Request(wire.Subject(ports.ServiceKeyValue, wire.KVSet), []byte(`{"key":"\ud83d\ude00","value":"aGk="}`), 5*time.Second)
	if err != nil || reply.Header.Get(wire.ErrorCodeHeader) != "" {
		t.Fatalf("a key of an escaped surrogate pair: %v %v", err, reply.Header)
	}
	if ok, err := store.Exists(t.Context(), "\U0001F600"); err != nil || !ok {
		t.Fatalf("the key of an escaped surrogate pair is not stored as its character: %v %v", ok, err)
	}
}

// A ttl_seconds that is not 0 but too small for a float64 to tell from 0
// (1e-400) is a 400 naming the field. Read as the 0 a float64 makes of it,
// it would keep the value forever, where every other TTL too small to keep
// is refused. Both the hand reader's body and one it leaves to the strict
// decoder (an escape in the key) are held to it; a 0 written any way is
// still no expiry.
func TestATTLTooSmallToTellFromZeroIsABadRequestNotForever(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newMemoryKV(t)
	newHost(t, url, natsapi.Options{}, natsapi.KeyValue(store))
	nc := natstest.Connect(t, url)
	set := func(key, ttl string) (string, string) {
		body := `{"key":"` + key + `","value":"aGk=","ttl_seconds":` + ttl + `}`
		reply, err := nc.Request(wire.Subject(ports.ServiceKeyValue, wire.KVSet), []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)
	}
	for _, key := range []string{"k", `\u006b`} {
		for _, ttl := range []string{"1e-400", "-1e-400", "0." + strings.Repeat("0", 400) + "1", "5E-999"} {
			if code, msg := set(key, ttl); code != "400" || !strings.Contains(msg, `field "ttl_seconds"`) {
				t.Errorf("key %s, ttl_seconds %.20s: answered %q %q, want 400 naming ttl_seconds", key, ttl, code, msg)
			}
			if ok, err := store.Exists(t.Context(), "k"); err != nil || ok {
				t.Fatalf("key %s, ttl_seconds %.20s: the value was stored (%v, %v), to be kept forever", key, ttl, ok, err)
			}
		}
	}
	for _, ttl := range []string{"0", "-0", "0.0", "0e-400", "0E5"} {
		if code, msg := set("zero", ttl); code != "" {
			t.Errorf("ttl_seconds %s: answered %q %q, want it taken as no expiry", ttl, code, msg)
		}
	}
}

// protocol.md gives ttl_seconds 0 or left out for "no expiry", and null
// no meaning; no Go facade has ever sent it (the field is left out for 0).
// A set or set_if_absent with "ttl_seconds":null, on keyvalue and on
// cache, is a 400 naming the field that stores nothing, rather than a
// value kept for good that a caller may have meant to expire.
func TestATTLOfNullIsABadRequestNotForever(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	kv, cache := newMemoryKV(t), newMemoryKV(t)
	newHost(t, url, natsapi.Options{}, natsapi.KeyValue(kv), natsapi.Cache(cache))
	nc := natstest.Connect(t, url)
	stores := map[string]ports.KeyValue{ports.ServiceKeyValue: kv, ports.ServiceCache: cache}
	for service, store := range stores {
		for _, op := range []string{wire.KVSet, wire.KVSetIfAbsent} {
			for _, body := range []string{`{"key":"k","value":"aGk=","ttl_seconds":null}`, `{"ttl_seconds": null ,"key":"k","value":"aGk="}`} {
				reply, err := nc.Request(wire.Subject(service, op), []byte(body), 5*time.Second)
				if err != nil {
					t.Fatalf("%s %s %s: %v", service, op, body, err)
				}
				if code, msg := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader); code != "400" || !strings.Contains(msg, "ttl_seconds") {
					t.Errorf("%s %s %s answered %q %q, want 400 naming ttl_seconds", service, op, body, code, msg)
				}
				if ok, err := store.Exists(t.Context(), "k"); err != nil || ok {
					t.Fatalf("%s %s %s: the value was stored (%v, %v), to be kept forever", service, op, body, ok, err)
				}
			}
		}
	}
}

// An empty body, or one of JSON white space (space, tab, CR, LF), is read
// as {}. Any other body must be JSON: a vertical tab, a form feed or a
// no-break space is not white space to JSON, so such a body is a 400, not
// a call with every field left out.
func TestABodyOfWhiteSpaceJSONDoesNotKnowIsABadRequest(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newMemoryKV(t)
	if err := store.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	newHost(t, url, natsapi.Options{}, natsapi.KeyValue(store))
	nc := natstest.Connect(t, url)
	list := wire.Subject(ports.ServiceKeyValue, wire.KVListKeys)
	for _, body := range []string{"\v", "\f", "\u00a0", "\u0085", " \v\n"} {
		reply, err := nc.Request(list, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if code := reply.Header.Get(wire.ErrorCodeHeader); code != "400" {
			t.Errorf("list_keys with the body %q answered %q %s, want 400", body, code, reply.Data)
		}
	}
	for _, body := range []string{"", " \t\r\n"} {
		reply, err := nc.Request(list, []byte(body), 5*time.Second)
		if err != nil || reply.Header.Get(wire.ErrorCodeHeader) != "" || string(reply.Data) != `{"keys":["k"],"cursor":""}` {
			t.Errorf("list_keys with the body %q: %v %v %s, want the keys as for {}", body, err, reply.Header, reply.Data)
		}
	}
}

// A body is a JSON object. encoding/json reads null into a struct as if
// it were {}, so a body of null ran as a call with every field left out;
// it is a 400 saying an object is wanted, as an array or a string is.
func TestABodyOfNullIsABadRequestNotAnEmptyObject(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newMemoryKV(t)
	if err := store.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	newHost(t, url, natsapi.Options{}, natsapi.KeyValue(store))
	nc := natstest.Connect(t, url)
	list := wire.Subject(ports.ServiceKeyValue, wire.KVListKeys)
	for _, body := range []string{"null", " null\n", "[]", `"k"`, "1"} {
		reply, err := nc.Request(list, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if code, msg := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader); code != "400" || !strings.Contains(msg, "want a JSON object") {
			t.Errorf("list_keys with the body %q answered %q %q %s, want 400 wanting an object", body, code, msg, reply.Data)
		}
	}
}

func TestTheKeyValueWireFormat(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	newHost(t, url, natsapi.Options{}, natsapi.KeyValue(newMemoryKV(t)))
	nc := natstest.Connect(t, url)
	call := func(op, body string) (string, string) {
		reply, err := nc.Request(wire.Subject(ports.ServiceKeyValue, op), []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		return string(reply.Data), reply.Header.Get(wire.ErrorCodeHeader)
	}
	steps := []struct{ op, body, want, code string }{
		{"set", `{"key":"k","value":"aGk="}`, `{}`, ""},
		{"get", `{"key":"k"}`, `{"value":"aGk="}`, ""},
		{"get", `{"key":"nope"}`, ``, "404"},
		{"set_if_absent", `{"key":"k","value":"aGk="}`, `{"set":false}`, ""},
		{"exists", `{"key":"k"}`, `{"exists":true}`, ""},
		{"list_keys", `{"prefix":"k"}`, `{"keys":["k"],"cursor":""}`, ""},
		{"delete_if_value", `{"key":"k","value":"eA=="}`, `{"deleted":false}`, ""},
		{"delete", `{"key":"k"}`, `{"deleted":true}`, ""},
		{"exists", `{"key":"k"}`, `{"exists":false}`, ""},
	}
	for _, s := range steps {
		got, code := call(s.op, s.body)
		if code != s.code || (s.code == "" && got != s.want) {
			t.Fatalf("%s %s = %s (code %q), want %s (code %q)", s.op, s.body, got, code, s.want, s.code)
		}
	}
}

// delete_if_value deletes a key only if it holds the value the caller
// names. A body that leaves value out names none: it is a 400 naming the
// field that deletes nothing, not a condition on the empty value, which
// would delete a key holding "". A value of null is the empty value, as
// every Go facade sends DeleteIfValue's nil, and keeps working.
func TestADeleteIfValueThatNamesNoValueIsABadRequestAndDeletesNothing(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newMemoryKV(t)
	newHost(t, url, natsapi.Options{}, natsapi.KeyValue(store))
	nc := natstest.Connect(t, url)
	if err := store.Set(t.Context(), "k", []byte{}, 0); err != nil {
		t.Fatal(err)
	}
	call := func(body string) (string, string, string) {
		reply, err := nc.Request(wire.Subject(ports.ServiceKeyValue, wire.KVDeleteIfValue), []byte(body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return string(reply.Data), reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)
	}
	for _, body := range []string{`{"key":"k"}`, `{"key":"k" }`, "{\"key\":\"\\u006b\"}"} {
		if got, code, msg := call(body); code != "400" || !strings.Contains(msg, `"value"`) {
			t.Errorf("%s answered %q %q %q, want 400 naming value", body, got, code, msg)
		}
		if ok, err := store.Exists(t.Context(), "k"); err != nil || !ok {
			t.Fatalf("after %s the key holding \"\" is gone (%v, %v): a call naming no value deleted it", body, ok, err)
		}
	}
	if got, code, msg := call(`{"key":"k","value":null}`); code != "" || got != `{"deleted":true}` {
		t.Fatalf(`value null answered %q %q %q, want {"deleted":true}: null is the empty value a Go facade sends`, got, code, msg)
	}
}

// set and set_if_absent, in keyvalue and in cache, store the value the
// caller gives. A body that leaves value out gives none: it is a 400
// naming the field that stores nothing, not a write of the empty value,
// which would replace what the key held with "". No Go facade leaves it
// out: each writes a nil value as null, which is the empty value and
// keeps working.
func TestASetThatGivesNoValueIsABadRequestAndStoresNothing(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	kv, cache := newMemoryKV(t), newMemoryCache(t)
	newHost(t, url, natsapi.Options{}, natsapi.KeyValue(kv), natsapi.Cache(cache))
	nc := natstest.Connect(t, url)
	ctx := t.Context()
	stores := map[string]interface {
		Get(context.Context, string) ([]byte, error)
		Set(context.Context, string, []byte, time.Duration) error
	}{ports.ServiceKeyValue: kv, ports.ServiceCache: cache}
	for service, store := range stores {
		if err := store.Set(ctx, "held", []byte("hi"), 0); err != nil {
			t.Fatal(err)
		}
		call := func(op, body string) (string, string, string) {
			reply, err := nc.Request(wire.Subject(service, op), []byte(body), 5*time.Second)
			if err != nil {
				t.Fatalf("%s %s %s: %v", service, op, body, err)
			}
			return string(reply.Data), reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)
		}
		for _, op := range []string{"set", "set_if_absent"} {
			for _, body := range []string{`{"key":"held"}`, `{"key":"fresh"}`, `{"key":"fresh","ttl_seconds":60}`, `{ "key" : "fresh" }`, `{"key":"\u0066resh"}`, ``} {
				if got, code, msg := call(op, body); code != "400" || !strings.Contains(msg, `"value"`) {
					t.Errorf("%s %s %q answered %q %q %q, want 400 naming value", service, op, body, got, code, msg)
				}
			}
			if v, err := store.Get(ctx, "held"); err != nil || string(v) != "hi" {
				t.Fatalf("%s: after %s without value the key holds %q (%v), want \"hi\": a call naming no value overwrote it", service, op, v, err)
			}
			if _, err := store.Get(ctx, "fresh"); !errors.Is(err, ports.ErrNotFound) {
				t.Fatalf("%s: after %s without value the key fresh is there (%v): a call naming no value stored one", service, op, err)
			}
		}
		if got, code, msg := call("set", `{"key":"held","value":null}`); code != "" || got != `{}` {
			t.Fatalf("%s: set with value null answered %q %q %q, want {}: null is the empty value a Go facade sends", service, got, code, msg)
		}
		if v, err := store.Get(ctx, "held"); err != nil || len(v) != 0 {
			t.Fatalf("%s: after a set with value null the key holds %q (%v), want the empty value", service, v, err)
		}
	}
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// interrupted reports whether err is an engine's answer that it stopped
// the call while it ran: a 500, never a 503, since the call may have
// taken effect and must not be sent again on its own.
func interrupted(err error) bool {
	var re *wire.RemoteError
	return errors.As(err, &re) && re.Code == wire.CodeInternal && strings.Contains(re.Message, wire.ErrInterrupted.Error())
}

// A call whose reply subject is not an inbox is dropped as it arrives: it
// does not run, so a caller cannot have the engine act on its behalf and
// then write the answer where the caller may not.
func TestACallWithAReplyOutsideTheInboxesDoesNotRun(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := &echo{name: "echo"}
	newHost(t, url, natsapi.Options{}, e.service())
	nc := natstest.Connect(t, url)
	if err := nc.PublishRequest(sayer, "$KV.ABI_ENGINE.owner", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ask(nc, 5*time.Second); err != nil { // after it, on the same subscription
		t.Fatal(err)
	}
	if n := e.calls.Load(); n != 1 {
		t.Fatalf("%d calls ran, want only the one with an inbox", n)
	}
}
