package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	"github.com/abi-engine/engine/adapters/primary/natsapi"
	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	objmemory "github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	vecmemory "github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// engine stands for the engine the API reports on: a status and a
// readiness the test sets.
type engine struct{ ready atomic.Bool }

func (e *engine) Status() any { return map[string]any{"role": "serve", "state": "serving"} }
func (e *engine) Ready() bool { return e.ready.Load() }
func (e *engine) Alive() bool { return true }

// kernel runs memory stores behind a real host on an embedded broker and
// returns their client facades, as the app gives them to the API.
func kernel(t *testing.T, secret []byte) (string, httpapi.Services) {
	t.Helper()
	return kernelWith(t, secret, natsapi.TransferOptions{})
}

// kernelWith is kernel with the engine's transfers set by transfer, whose
// Owner and Conn it fills in, and the facades' client by opts.
func kernelWith(t *testing.T, secret []byte, transfer natsapi.TransferOptions, opts ...natsclient.Option) (string, httpapi.Services) {
	t.Helper()
	ctx := t.Context()
	kv, err := kvmemory.Open(ctx, kvmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := docmemory.Open(ctx, docmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	objects, err := objmemory.Open(ctx, objmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	vectors, err := vecmemory.Open(ctx, vecmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	url := natstest.StartServer(t).ClientURL()
	owner := domain.NewInstanceID()
	session := natstest.Connect(t, url)
	transfer.Owner, transfer.Conn = owner, session
	transfers, err := natsapi.NewTransferHost(transfer)
	if err != nil {
		t.Fatal(err)
	}
	// Calls and answers larger than a message go by overflow sessions, as
	// on the engine.
	overflow, err := natsapi.NewOverflowHost(natsapi.OverflowOptions{Owner: owner, Conn: session, CallerSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	host, err := natsapi.NewHost(natsapi.Options{
		Owner:        owner,
		Connect:      func() (*nats.Conn, error) { return nats.Connect(url) },
		Replies:      session,
		CallerSecret: secret,
		Overflow:     overflow,
	}, natsapi.KeyValue(kv), natsapi.Document(docs), natsapi.VectorStore(vectors), natsapi.ObjectStorage(objects, transfers))
	if err != nil {
		t.Fatal(err)
	}
	for _, serve := range []func() error{overflow.Serve, transfers.Serve, host.Serve} {
		if err := serve(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		host.Stop()
		transfers.Stop()
		overflow.Stop()
	})
	return url, facades(natsclient.New(natstest.Connect(t, url), opts...))
}

func facades(c *natsclient.Client) httpapi.Services {
	return httpapi.Services{
		KeyValue:      natsclient.NewKeyValue(c),
		ObjectStorage: natsclient.NewObjectStorage(c),
		Document:      natsclient.NewDocument(c),
		VectorStore:   natsclient.NewVectorStore(c),
	}
}

// api is the API under test on a real port.
type api struct {
	t       *testing.T
	url     string
	token   string
	metrics *httpapi.Metrics
	engine  *engine
}

func serveAPI(t *testing.T, services httpapi.Services, o httpapi.Options) *api {
	t.Helper()
	e := &engine{}
	e.ready.Store(true)
	o.Engine, o.Services = e, services
	if o.Metrics == nil {
		o.Metrics = httpapi.NewMetrics()
	}
	o.Logger = slog.New(slog.DiscardHandler)
	srv := httptest.NewServer(httpapi.NewHandler(o))
	t.Cleanup(srv.Close)
	return &api{t: t, url: srv.URL, token: o.Token, metrics: o.Metrics, engine: e}
}

// do sends a request with the API's token and returns the response with its
// body read.
func (a *api) do(method, path string, body io.Reader, header ...string) (*http.Response, string) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(a.t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, a.url+path, body)
	if err != nil {
		a.t.Fatal(err)
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			if header[i+1] != "" {
				req.Host = header[i+1]
			}
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("%s %s: read the body: %v", method, path, err)
	}
	return resp, string(b)
}

// expect sends a request and fails unless it answers code.
func (a *api) expect(code int, method, path, body string, header ...string) (*http.Response, string) {
	a.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	resp, got := a.do(method, path, r, header...)
	if resp.StatusCode != code {
		a.t.Fatalf("%s %s answered %d %s, want %d", method, path, resp.StatusCode, got, code)
	}
	return resp, got
}

// memoryServices are memory stores called directly, where a facade adds
// nothing to what a test shows.
func memoryServices(t testing.TB) httpapi.Services {
	t.Helper()
	kv, err := kvmemory.Open(t.Context(), kvmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	objects, err := objmemory.Open(t.Context(), objmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return httpapi.Services{KeyValue: kv, ObjectStorage: objects}
}

// metric is the value of the named counter or gauge with exactly these
// labels, 0 when there is none.
func metric(t *testing.T, m *httpapi.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range s.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			switch {
			case s.GetCounter() != nil:
				return s.GetCounter().GetValue()
			case s.GetGauge() != nil:
				return s.GetGauge().GetValue()
			case s.GetHistogram() != nil:
				return float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}
