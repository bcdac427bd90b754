package natsclient_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/keyvalue/sqlite"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// A module's job runs under its engine's serving term (ports.FencingToken
// in the job's context), but its calls go through the facades to
// whichever engine serves the account. A job that ran on past its
// engine's fence (a process paused in the middle of a run, or a request
// nats.go held in its reconnect buffer and sent once the broker was back)
// reached the successor, which ran the call under its own, newer term: no
// store could tell it from the successor's own writes, and it landed over
// them. The call now carries its term, and an engine serving a newer one
// refuses it, 503 fenced, without running it.
func TestACallMadeUnderAnEndedTermIsNotRunByTheEngineOfANewerOne(t *testing.T) {
	const oldTerm, newTerm = 5, 7
	url := natstest.StartServer(t).ClientURL()
	store := termHost(t, url, newTerm)
	kv := natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))
	under := func(term uint64) context.Context {
		ctx, cancel := context.WithTimeout(ports.WithFencingToken(t.Context(), term), 30*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	// The successor's own job writes the key under the term it serves.
	if err := kv.Set(under(newTerm), "k", []byte("new"), 0); err != nil {
		t.Fatalf("Set under the serving term: %v", err)
	}
	// The old engine's job, resumed, writes under the term that ended.
	err := kv.Set(under(oldTerm), "k", []byte("old"), 0)
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("Set under an ended term: %v, want 503", err)
	}
	_, err = kv.Delete(under(oldTerm), "k")
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("Delete under an ended term: %v, want 503", err)
	}
	if v, err := store.Get(t.Context(), "k"); err != nil || string(v) != "new" {
		t.Fatalf("after the ended term's calls, k = %q, %v; want the serving term's %q", v, err, "new")
	}

	// A call of no term (a client, the HTTP API) runs as before.
	if err := kv.Set(t.Context(), "k", []byte("no term"), 0); err != nil {
		t.Fatalf("Set without a term: %v", err)
	}
	if v, err := kv.Get(under(newTerm), "k"); err != nil || string(v) != "no term" {
		t.Fatalf("k = %q, %v; want %q", v, err, "no term")
	}

	// A term that is not a decimal number above 0 is refused, naming the
	// header.
	raw := natsclient.New(natstest.Connect(t, url))
	for _, term := range []string{"-5", "0", "5x", "18446744073709551616"} {
		bad := nats.Header{wire.TermHeader: []string{term}}
		_, err = raw.Request(t.Context(), wire.Subject(ports.ServiceKeyValue, wire.KVSet), []byte(`{"key":"k","value":"YmFk"}`), bad)
		if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), wire.TermHeader) {
			t.Fatalf("Set with %s %q: %v, want 400 naming the header", wire.TermHeader, term, err)
		}
	}
	if v, err := store.Get(t.Context(), "k"); err != nil || string(v) != "no term" {
		t.Fatalf("after the refused set, k = %q, %v; want %q", v, err, "no term")
	}
}

// An engine that still admits calls after its successor took the lease
// over (it has not yet seen its own fence) receives the successor's
// module calls, made under the successor's newer term, whenever the two
// share the queue group. It ran them under its own, ended term: a write
// of the old term beside the new engine's, which an unfenced store took.
// It now refuses them, 503, unrun, and the caller's retry finds the
// engine of its term.
func TestACallMadeUnderANewerTermIsNotRunByTheEngineOfAnOlderOne(t *testing.T) {
	const oldTerm, newTerm = 5, 7
	url := natstest.StartServer(t).ClientURL()
	store := termHost(t, url, oldTerm)
	kv := natsclient.NewKeyValue(natsclient.New(natstest.Connect(t, url)))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	if err := kv.Set(ports.WithFencingToken(ctx, oldTerm), "k", []byte("old"), 0); err != nil {
		t.Fatalf("Set under the engine's own term: %v", err)
	}
	// One request, sent once on the connection itself: the facade would
	// go on sending a refused call for its whole retry window.
	nc := natstest.Connect(t, url)
	req := &nats.Msg{
		Subject: wire.Subject(ports.ServiceKeyValue, wire.KVSet),
		Data:    []byte(`{"key":"k","value":"bmV3"}`),
		Header:  nats.Header{wire.TermHeader: []string{"7"}},
	}
	reply, err := nc.RequestMsgWithContext(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	err = wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader))
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "term 7") {
		t.Fatalf("Set under term %d at the engine of term %d: %v, want 503 naming term 7", newTerm, oldTerm, err)
	}
	if v, err := store.Get(t.Context(), "k"); err != nil || string(v) != "old" {
		t.Fatalf("after the newer term's call, k = %q, %v; want %q, unrun", v, err, "old")
	}
}

// termHost serves keyvalue on a SQLite store at url, as an engine serving
// under term, and returns the store.
func termHost(t *testing.T, url string, term uint64) *sqlite.Store {
	t.Helper()
	store, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "kv.sqlite")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	host, err := natsapi.NewHost(natsapi.Options{
		Owner:   domain.NewInstanceID(),
		Connect: func() (*nats.Conn, error) { return nats.Connect(url) },
		Replies: natstest.Connect(t, url),
		Admit:   func() (uint64, bool) { return term, true },
	}, natsapi.KeyValue(store))
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop)
	return store
}
