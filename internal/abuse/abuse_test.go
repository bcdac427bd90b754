package abuse_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/callerauth"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

const (
	callerSecret = "a caller secret for the abuse suite, 32+ bytes"
	httpToken    = "abuse-suite-http-token"
)

// engine is a serving engine on its default local stores (SQLite, local
// files), its broker, and its HTTP API.
type engine struct {
	url     string // the broker
	http    string // the HTTP API's base URL
	dataDir string
}

func startEngine(t *testing.T) *engine {
	t.Helper()
	url := natstest.StartServer(t).ClientURL()
	dir := filepath.Join(t.TempDir(), "data")
	// A lease of a few seconds: the suite is about callers, and a lease
	// of one second may lapse on a loaded machine while the floods are
	// answered.
	yaml := fmt.Sprintf(`nats:
  url: %s
  caller_secret: %q
  engine: {role: serve, lease_seconds: 4, drain_seconds: 1}
http: {listen: "127.0.0.1:0", token: %q}
data_dir: %s
`, url, callerSecret, httpToken, dir)
	cfg, err := config.Parse("abuse.yaml", []byte(yaml), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var (
		h   *app.HTTP
		eng *app.Engine
	)
	a := fxtest.New(t, app.Graph(app.Options{Config: cfg, Version: "abuse", Logger: slog.New(slog.DiscardHandler)}),
		fx.Populate(&h, &eng), fx.StartTimeout(30*time.Second), fx.NopLogger)
	a.RequireStart()
	t.Cleanup(a.RequireStop)
	// Serving, the engine's endpoints answer once their subscriptions
	// reach the broker; until then a call finds no responders.
	nc := natstest.Connect(t, url)
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := nc.Request(wire.Subject(ports.ServiceKeyValue, wire.KVExists), []byte(`{"key":"k"}`), 5*time.Second)
		if err == nil && eng.Ready() && eng.Outcome() == domain.OutcomeServe {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the engine does not answer a minute after its start: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &engine{url: url, http: "http://" + h.Addr(), dataDir: dir}
}

// signed is a header carrying a token for caller.
func signed(t *testing.T, caller string) nats.Header {
	t.Helper()
	token, err := callerauth.Sign([]byte(callerSecret), caller, callerauth.TTL)
	if err != nil {
		t.Fatal(err)
	}
	return nats.Header{wire.AuthHeader: {token}}
}

// answer is what a hostile input got: a status code and the error's text.
type answer struct {
	code int
	text string
	body []byte
}

// ask sends one raw request, without a facade's retries.
func ask(t *testing.T, nc *nats.Conn, subject string, header nats.Header, body string) answer {
	t.Helper()
	msg := nats.NewMsg(subject)
	msg.Data = []byte(body)
	for k, v := range header {
		msg.Header[k] = v
	}
	reply, err := nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatalf("%s %.80s: %v", subject, body, err)
	}
	code := 200
	if c := reply.Header.Get(wire.ErrorCodeHeader); c != "" {
		code, _ = strconv.Atoi(c)
	}
	return answer{code: code, text: reply.Header.Get(wire.ErrorHeader), body: reply.Data}
}

// askHTTP sends one request to the HTTP API with its token.
func askHTTP(t *testing.T, e *engine, method, path, body string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.http+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+httpToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, text: string(b), body: b}
}

// nestedJSON is a JSON object nesting depth levels.
func nestedJSON(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + `{"n":1}` + strings.Repeat(`}`, depth-1)
}

// bystander calls every service over the facades, signed as its own
// caller, until stop; every call must succeed.
type bystander struct {
	calls, failed atomic.Int64
	mu            sync.Mutex
	errs          []error
}

func (b *bystander) run(t *testing.T, e *engine, stop <-chan struct{}) {
	c := natsclient.New(natstest.Connect(t, e.url), natsclient.WithSigner(callerauth.NewSigner([]byte(callerSecret), "bystander")))
	kv, docs, objs, vecs := natsclient.NewKeyValue(c), natsclient.NewDocument(c), natsclient.NewObjectStorage(c), natsclient.NewVectorStore(c)
	ctx := context.Background()
	big := bytes.Repeat([]byte("b"), 2<<20) // past one message: uploaded through an overflow session
	steps := []func(i int) error{
		func(i int) error { return kv.Set(ctx, "bystander/k", []byte(strconv.Itoa(i)), 0) },
		func(i int) error {
			v, err := kv.Get(ctx, "bystander/k")
			if err == nil && string(v) != strconv.Itoa(i) {
				err = fmt.Errorf("read %q back, wrote %d", v, i)
			}
			return err
		},
		func(int) error { return docs.EnsureCollection(ctx, "shared") },
		func(i int) error {
			_, err := docs.Put(ctx, "shared", "bystander", map[string]any{"n": float64(i), "who": "bystander"}, ports.Cond{})
			return err
		},
		func(int) error {
			found, _, err := docs.Find(ctx, "shared", ports.Query{Where: map[string]any{"who": "bystander"}, OrderBy: "n"})
			if err == nil && len(found) != 1 {
				err = fmt.Errorf("found %d documents of the bystander, want 1", len(found))
			}
			return err
		},
		func(int) error {
			_, err := objs.Put(ctx, "bystander/o", strings.NewReader("object"), ports.PutObjectOptions{})
			return err
		},
		func(int) error {
			r, _, err := objs.Get(ctx, "bystander/o", ports.GetObjectOptions{})
			if err != nil {
				return err
			}
			defer r.Close()
			got, err := io.ReadAll(r)
			if err == nil && string(got) != "object" {
				err = fmt.Errorf("read object %q", got)
			}
			return err
		},
		func(int) error { return vecs.CreateCollection(ctx, "bystander", 2, ports.MetricDot) },
		func(int) error {
			_, err := vecs.Search(ctx, "bystander", []float32{1, 0}, 10, nil)
			return err
		},
		func(int) error { return kv.Set(ctx, "bystander/big", big, 0) },
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		for _, step := range steps {
			b.calls.Add(1)
			if err := step(i); err != nil {
				b.failed.Add(1)
				b.mu.Lock()
				b.errs = append(b.errs, err)
				b.mu.Unlock()
			}
		}
	}
}

// hostileCase is one input of the table: what it sends, the code it must
// get and what the answer must say.
type hostileCase struct {
	name string
	send func(t *testing.T, e *engine, nc *nats.Conn) answer
	code int
	says string
}

// call is a hostile input sent as one NATS request, signed as "hostile".
func call(service, op, body string) func(t *testing.T, e *engine, nc *nats.Conn) answer {
	return func(t *testing.T, _ *engine, nc *nats.Conn) answer {
		return ask(t, nc, wire.Subject(service, op), signed(t, "hostile"), body)
	}
}

// viaHTTP is a hostile input sent to the HTTP API.
func viaHTTP(method, path, body string) func(t *testing.T, e *engine, nc *nats.Conn) answer {
	return func(t *testing.T, e *engine, _ *nats.Conn) answer { return askHTTP(t, e, method, path, body) }
}

func TestHostileCallersGetClearAnswersWhileABystanderIsServed(t *testing.T) {
	e := startEngine(t)
	hostile := natstest.Connect(t, e.url)
	if a := ask(t, hostile, wire.Subject(ports.ServiceDocument, wire.DocEnsureCollection), signed(t, "hostile"), `{"name":"shared"}`); a.code != 200 {
		t.Fatalf("ensure the shared collection: %d %s", a.code, a.text)
	}

	var by bystander
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		by.run(t, e, stop)
	}()
	// waitCalls waits for the bystander to have made n calls: one that
	// gets none through in a minute is starved.
	waitCalls := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for by.calls.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("the bystander made %d calls in a minute, want %d: starved", by.calls.Load(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCalls(10)

	const maxInt64 = "9223372036854775807"
	cases := []hostileCase{
		{"a document nested past the most", call(ports.ServiceDocument, wire.DocPut,
			`{"collection":"shared","id":"deep","data":`+nestedJSON(ports.MaxDepth+1)+`}`), 400, "nests more than 100 levels"},
		{"a document nested to the most, kept and queryable", call(ports.ServiceDocument, wire.DocPut,
			`{"collection":"shared","id":"deepest","data":`+nestedJSON(ports.MaxDepth)+`}`), 200, ""},
		{"NUL in a document string", call(ports.ServiceDocument, wire.DocPut,
			`{"collection":"shared","id":"nul","data":{"s":"a\u0000b"}}`), 400, "NUL"},
		{"NUL in a where value", call(ports.ServiceDocument, wire.DocFind,
			`{"collection":"shared","where":{"s":"\u0000"}}`), 400, "NUL"},
		{"a find limit of the largest int", call(ports.ServiceDocument, wire.DocFind,
			`{"collection":"shared","limit":`+maxInt64+`}`), 400, "limit " + maxInt64 + " is more than the most, 1000"},
		{"a find limit of a hundred million", call(ports.ServiceDocument, wire.DocFind,
			`{"collection":"shared","limit":100000000}`), 400, "limit"},
		{"a list_keys limit of the largest int", call(ports.ServiceKeyValue, wire.KVListKeys,
			`{"limit":`+maxInt64+`}`), 400, "limit"},
		{"a TTL that rounds to zero", call(ports.ServiceKeyValue, wire.KVSet,
			`{"key":"k","value":"aGk=","ttl_seconds":1e-10}`), 400, "ttl_seconds"},
		{"a TTL past the most", call(ports.ServiceKeyValue, wire.KVSet,
			`{"key":"k","value":"aGk=","ttl_seconds":1e12}`), 400, "ttl_seconds"},
		{"a cache TTL that rounds to zero", call(ports.ServiceCache, wire.CacheSet,
			`{"key":"k","value":"aGk=","ttl_seconds":1e-10}`), 400, "ttl_seconds"},
		{"an object list limit of the largest int", call(ports.ServiceObjectStorage, wire.OSList,
			`{"limit":`+maxInt64+`}`), 400, "limit"},
		{"a vector dimension of a million", call(ports.ServiceVectorStore, wire.VecCreateCollection,
			`{"name":"huge","dimension":1000000,"metric":"dot"}`), 400, "dimension"},
		{"a search k of a billion", call(ports.ServiceVectorStore, wire.VecSearch,
			`{"collection":"bystander","vector":[1,0],"k":1000000000}`), 400, "k is 1000000000"},
		{"over HTTP: a TTL that rounds to zero", viaHTTP("PUT", "/v1/kv/k?ttl=1ns", "v"), 400, "ttl"},
		{"over HTTP: a find limit of the largest int", viaHTTP("POST", "/v1/documents/shared/find",
			`{"limit":`+maxInt64+`}`), 400, "limit"},
		{"over HTTP: a document nested past the most", viaHTTP("PUT", "/v1/documents/shared/deep",
			nestedJSON(ports.MaxDepth+1)), 400, "nests more than 100 levels"},
		{"over HTTP: NUL in a document string", viaHTTP("PUT", "/v1/documents/shared/nul",
			`{"s":"a\u0000b"}`), 400, "NUL"},
		{"over HTTP: a search k of a billion", viaHTTP("POST", "/v1/vectors/bystander/search",
			`{"vector":[1,0],"k":1000000000}`), 400, "k is 1000000000"},
		{"2000 unsigned calls at once", func(t *testing.T, _ *engine, nc *nats.Conn) answer {
			return flood(t, nc, wire.Subject(ports.ServiceKeyValue, wire.KVGet), nil, `{"key":"k"}`, 2000)
		}, 401, ""},
		{"every overflow byte of its share, then more", func(t *testing.T, _ *engine, nc *nats.Conn) answer {
			if a := ask(t, nc, wire.OverflowOpenSubject, signed(t, "hostile"), `{"size":268435456}`); a.code != 200 {
				return a
			}
			var last answer
			for range 3 {
				last = ask(t, nc, wire.OverflowOpenSubject, signed(t, "hostile"), `{"size":268435456}`)
			}
			return last
		}, 503, "one caller holds"},
		{"an upload reservation that sends nothing is released", func(t *testing.T, _ *engine, nc *nats.Conn) answer {
			deadline := time.Now().Add(30 * time.Second)
			for {
				a := ask(t, nc, wire.OverflowOpenSubject, signed(t, "hostile"), `{"size":268435456}`)
				if a.code != 503 || time.Now().After(deadline) {
					return a
				}
				time.Sleep(200 * time.Millisecond)
			}
		}, 200, ""},
		{"every transfer of its share, then more", func(t *testing.T, _ *engine, nc *nats.Conn) answer {
			var last answer
			for range 9 {
				last = ask(t, nc, wire.Subject(ports.ServiceObjectStorage, wire.OSTransferOpen), signed(t, "hostile"), `{"mode":"put","key":"h"}`)
			}
			return last
		}, 503, "the most one caller holds"},
	}
	for _, c := range cases {
		before := by.calls.Load()
		got := c.send(t, e, hostile)
		if got.code != c.code || !strings.Contains(got.text, c.says) {
			t.Errorf("%s: answered %d %q, want %d saying %q", c.name, got.code, got.text, c.code, c.says)
		}
		if strings.Contains(got.text, e.dataDir) {
			t.Errorf("%s: the answer names the engine's data directory: %q", c.name, got.text)
		}
		// The bystander gets calls through while each hostile input lands.
		waitCalls(before + 10)
	}

	close(stop)
	<-done
	if n := by.failed.Load(); n > 0 {
		by.mu.Lock()
		defer by.mu.Unlock()
		t.Fatalf("%d of the bystander's %d calls failed, first: %v", n, by.calls.Load(), by.errs[0])
	}
	t.Logf("the bystander made %d calls, all answered", by.calls.Load())
}

// flood sends n requests at once and returns the first answer that is not
// the code every other one has, or that code if all agree.
func flood(t *testing.T, nc *nats.Conn, subject string, header nats.Header, body string, n int) answer {
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
		msg.Data = []byte(body)
		for k, v := range header {
			msg.Header[k] = v
		}
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	codes := map[string]int{}
	var first answer
	timeout := time.After(60 * time.Second)
	for i := range n {
		select {
		case msg := <-replies:
			code, _ := strconv.Atoi(msg.Header.Get(wire.ErrorCodeHeader))
			if i == 0 {
				first = answer{code: code, text: msg.Header.Get(wire.ErrorHeader)}
			}
			codes[msg.Header.Get(wire.ErrorCodeHeader)]++
		case <-timeout:
			t.Fatalf("%d of %d answers in 60s", i, n)
		}
	}
	if len(codes) != 1 {
		return answer{code: -1, text: fmt.Sprint(codes)}
	}
	return first
}
