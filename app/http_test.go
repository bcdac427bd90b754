package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	leasejs "github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/jsonkeys"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/tcpproxy"
	"github.com/abi-engine/engine/ports"
)

// startWithHTTP runs an engine's graph and returns it with its HTTP API.
func startWithHTTP(t *testing.T, cfg *config.Config) (*app.Engine, *app.HTTP, *fxtest.App) {
	t.Helper()
	var (
		e *app.Engine
		h *app.HTTP
	)
	a := fxtest.New(t, app.Graph(options(cfg)), fx.Populate(&e, &h), fx.StartTimeout(30*time.Second))
	a.RequireStart()
	return e, h, a
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestTheHTTPAPIAnswersForEveryRole(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	served, h, a := startWithHTTP(t, testConfig(t, url, "serve", "", memoryServices))
	base := "http://" + h.Addr()
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz of a serving engine: %d %s", code, body)
	}
	if code, body := get(t, base+"/healthz"); code != http.StatusOK || !served.Alive() {
		t.Fatalf("/healthz of a serving engine: %d %s", code, body)
	}
	code, body := get(t, base+"/status")
	var st app.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != http.StatusOK {
		t.Fatalf("/status: %d %s (%v)", code, body, err)
	}
	// Every key of /status is snake_case, the lease's holder included.
	jsonkeys.SnakeCase(t, []byte(body))
	if !strings.Contains(body, `"holder":{"instance_id":"`+served.Me().InstanceID+`"`) {
		t.Errorf("/status names the holder otherwise: %s", body)
	}
	if st.State != "serving" || st.InstanceID != served.Me().InstanceID || st.Lease == nil ||
		st.Lease.Holder.InstanceID != served.Me().InstanceID || st.Lease.Revision == 0 || len(st.Services) == 0 {
		t.Fatalf("/status of a serving engine: %s", body)
	}
	if code, body := get(t, base+"/metrics"); code != http.StatusOK || !strings.Contains(body, `abi_engine_lease_state{state="serving"} 1`) {
		t.Fatalf("/metrics of a serving engine: %d\n%s", code, body)
	}
	// A kernel call over NATS and the lease's renewals are counted too.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := served.Services().KeyValue.Exists(ctx, "counted"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`abi_engine_calls_total{code="200",operation="exists",service="keyvalue",via="nats"} 1`,
		`abi_engine_lease_renewals_total{result="ok"}`,
		`abi_engine_nats_sessions_open 0`,
	} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, body := get(t, base+"/metrics")
			if strings.Contains(body, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/metrics lacks %s:\n%s", want, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	client, ch, b := startWithHTTP(t, testConfig(t, url, "client", "", memoryServices))
	cbase := "http://" + ch.Addr()
	if code, body := get(t, cbase+"/readyz"); code != http.StatusOK || !client.Ready() {
		t.Fatalf("/readyz of a client engine: %d %s", code, body)
	}
	if code, body := get(t, cbase+"/healthz"); code != http.StatusOK || !client.Alive() {
		t.Fatalf("/healthz of a client engine: %d %s", code, body)
	}
	if code, body := get(t, cbase+"/status"); code != http.StatusOK || !strings.Contains(body, `"state":"client"`) {
		t.Fatalf("/status of a client engine: %d %s", code, body)
	} else {
		jsonkeys.SnakeCase(t, []byte(body))
	}
	// The client's REST surface reaches the serving engine.
	req, err := http.NewRequestWithContext(t.Context(), "PUT", cbase+"/v1/kv/through-the-client", strings.NewReader("v"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT through the client: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, body := get(t, base+"/v1/kv/through-the-client"); code != http.StatusOK || body != "v" {
		t.Fatalf("GET from the serving engine: %d %q", code, body)
	}
	b.RequireStop()
	a.RequireStop()
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatalf("the HTTP API answers after the engine stopped")
	}
}

func TestATakenHTTPPortFailsTheStart(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	_, h, first := startWithHTTP(t, testConfig(t, url, "serve", "", memoryServices))
	defer first.RequireStop()
	cfg := testConfig(t, url, "client", "", memoryServices)
	cfg.HTTP.Listen = h.Addr()
	a := fx.New(app.Graph(options(cfg)), fx.NopLogger)
	err := a.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "http.listen") {
		t.Fatalf("start on a taken port: %v", err)
	}
}

// A serving engine whose HTTP port is taken fails its start before it
// claims the lease. Claiming first, it served for a moment and then handed
// the account over again, which callers saw as an engine that vanished.
func TestATakenHTTPPortFailsTheStartBeforeTheClaim(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := testConfig(t, url, "serve", "", memoryServices)
	cfg.HTTP.Listen = taken.Addr().String()
	a := fx.New(app.Graph(options(cfg)), fx.NopLogger)
	if err := a.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "http.listen") {
		t.Fatalf("start on a taken port: %v", err)
	}
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), leasejs.DefaultBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if history, err := kv.History(t.Context(), "owner"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the lease was written before the start failed: %d entries, %v", len(history), err)
	}
}

// slowUpload sends an object to the API a chunk every 250 ms, above the
// API's minimum rate, until finish is closed, and then reports the answer's
// status (0 when the request failed).
func slowUpload(t *testing.T, url string, finish <-chan struct{}) <-chan int {
	t.Helper()
	pr, pw := io.Pipe()
	go func() {
		chunk := make([]byte, 16<<10)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-finish:
				pw.Close()
				return
			case <-tick.C:
				if _, err := pw.Write(chunk); err != nil {
					return
				}
			}
		}
	}()
	answer := make(chan int, 1)
	go func() {
		req, err := http.NewRequest("PUT", url, pr)
		if err != nil {
			answer <- 0
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answer <- 0
			return
		}
		resp.Body.Close()
		answer <- resp.StatusCode
	}()
	return answer
}

// stopOnASignal starts an engine with its API, and returns it with a stop
// made as the command makes it on a signal: one context for the whole app,
// of its StopTimeout and a little more. released is closed when the lease
// is.
func stopOnASignal(t *testing.T) (e *app.Engine, h *app.HTTP, stop func() <-chan error, released <-chan struct{}) {
	t.Helper()
	url := natstest.StartServer(t).ClientURL()
	a := app.New(options(testConfig(t, url, "serve", "", memoryServices)), fx.Populate(&e, &h))
	if err := a.Err(); err != nil {
		t.Fatal(err)
	}
	rel := make(chan struct{})
	e.Observe(func(tr domain.Transition) {
		if tr.To == domain.StateReleased {
			close(rel)
		}
	})
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	t.Cleanup(func() {
		select {
		case <-stopped:
		default:
			_ = e.Stop(context.Background())
		}
	})
	return e, h, func() <-chan error {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), a.StopTimeout()+5*time.Second)
			defer cancel()
			stopped <- a.Stop(ctx)
		}()
		return stopped
	}, rel
}

// An HTTP request in progress at a stop is one of the engine's clients'
// calls: it does not hold up the release, it finishes during the drain,
// through the facades the engine still holds open, and it is answered.
func TestAnHTTPRequestInProgressAtAStopIsAnsweredAfterTheRelease(t *testing.T) {
	e, h, stop, released := stopOnASignal(t)
	finish := make(chan struct{})
	answer := slowUpload(t, "http://"+h.Addr()+"/v1/objects/slow", finish)
	waitFor(t, "the upload to open its transfer", func() bool { return e.SessionsOpen() > 0 })

	stopped := stop()
	select {
	case <-released:
	case code := <-answer:
		t.Fatalf("the upload was answered (%d) before the release", code)
	case <-time.After(10 * time.Second):
		t.Fatal("the lease was not released while an HTTP upload was in progress")
	}
	close(finish)
	if code := <-answer; code != http.StatusOK {
		t.Fatalf("the upload in progress at the stop was answered %d, want 200", code)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// An HTTP request that outlasts the drain is closed at its deadline, as a
// NATS call is, and the stop goes on: the slow request costs neither the
// release nor the drain of the engine's own calls.
func TestAnHTTPRequestThatOutlastsTheDrainIsClosedAtItsDeadline(t *testing.T) {
	e, h, stop, released := stopOnASignal(t)
	finish := make(chan struct{})
	defer close(finish)
	answer := slowUpload(t, "http://"+h.Addr()+"/v1/objects/endless", finish)
	waitFor(t, "the upload to open its transfer", func() bool { return e.SessionsOpen() > 0 })

	stopped := stop()
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the lease was not released while an HTTP upload was in progress")
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stop waited on an HTTP upload past its drain (1 s)")
	}
	if code := <-answer; code == http.StatusOK {
		t.Fatal("an upload closed at the drain deadline was answered 200")
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// heldUpload sends an object to the API with token as its bearer (none
// when ""), from the loopback address from, a chunk every 250 ms, above
// the API's minimum rate, until finish is closed, and then reports the
// answer's status (0 when the request failed).
func heldUpload(t *testing.T, url, token, from string, finish <-chan struct{}) <-chan int {
	t.Helper()
	pr, pw := io.Pipe()
	go func() {
		chunk := make([]byte, 4<<10)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-finish:
				pw.Close()
				return
			case <-tick.C:
				if _, err := pw.Write(chunk); err != nil {
					return
				}
			}
		}
	}()
	answer := make(chan int, 1)
	go func() {
		req, err := http.NewRequest("PUT", url, pr)
		if err != nil {
			answer <- 0
			return
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			answer <- 0
			return
		}
		resp.Body.Close()
		answer <- resp.StatusCode
	}()
	return answer
}

// The HTTP API is a caller of its own: its clients holding every one of
// its object transfers leave the engine's modules their own share, so a
// module's object put and get through its facades are served at once,
// with caller tokens and without. docs/protocol.md promises that HTTP
// clients never take the transfers of NATS callers; the modules are such
// callers.
func TestHTTPClientsHoldingEveryTransferLeaveTheModulesTheirShare(t *testing.T) {
	for _, signed := range []bool{false, true} {
		t.Run(map[bool]string{false: "without caller tokens", true: "with caller tokens"}[signed], func(t *testing.T) {
			url := natstest.StartServer(t).ClientURL()
			cfg := testConfig(t, url, "serve", "", memoryServices)
			token := ""
			if signed {
				cfg.NATS.CallerSecret = strings.Repeat("k", config.MinCallerSecret)
				token = strings.Repeat("t", 32)
				cfg.HTTP.Token = token
			}
			e, h, a := startWithHTTP(t, cfg)
			defer a.RequireStop()

			finish := make(chan struct{})
			release := sync.OnceFunc(func() { close(finish) })
			defer release()
			var answers []<-chan int
			// Each from an address of its own: one client runs only its
			// share of the API's transfers.
			for i := range httpapi.DefaultMaxTransfers {
				from := fmt.Sprintf("127.0.6.%d", i+1)
				answers = append(answers, heldUpload(t, fmt.Sprintf("http://%s/v1/objects/held-%d", h.Addr(), i), token, from, finish))
			}
			waitFor(t, "the HTTP uploads to hold every transfer of the API", func() bool {
				return e.SessionsOpen() == httpapi.DefaultMaxTransfers
			})

			// The module's calls get a little longer than the facade's
			// retry window: refused, they would fail within it.
			ctx, cancel := context.WithTimeout(t.Context(), 2*natsclient.RetryWindow)
			defer cancel()
			objects := e.Services().ObjectStorage
			if _, err := objects.Put(ctx, "module", strings.NewReader("the module's"), ports.PutObjectOptions{}); err != nil {
				t.Fatalf("a module's put while HTTP clients hold every API transfer: %v", err)
			}
			r, _, err := objects.Get(ctx, "module", ports.GetObjectOptions{})
			if err != nil {
				t.Fatalf("a module's get while HTTP clients hold every API transfer: %v", err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || string(got) != "the module's" {
				t.Fatalf("a module's get read %q, %v", got, err)
			}

			release()
			for i, answer := range answers {
				if code := <-answer; code != http.StatusOK {
					t.Errorf("HTTP upload %d was answered %d, want 200", i, code)
				}
			}
		})
	}
}

// putKey sets key to value through the HTTP API at base and returns the
// answer's status.
func putKey(ctx context.Context, base, key, value string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "PUT", base+"/v1/kv/"+key, strings.NewReader(value))
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// An HTTP request whose call the API sends while its NATS connection is
// reconnecting fails, and never lands later: nats.go's reconnect buffer
// would send it once the connection came back, after its client had given
// up and after the key was written again. Before, the API's connection
// kept that buffer, and a write its client saw fail overwrote a later one.
func TestAnHTTPWriteGivenUpWhileItsConnectionReconnectsNeverLandsLater(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	url := natstest.StartServer(t).ClientURL()
	served, _, a := startWithHTTP(t, testConfig(t, url, "serve", "", memoryServices))
	defer a.RequireStop()
	// The engine whose API is used reaches the broker through a proxy; a
	// client engine, so that the engine that runs the calls stays
	// connected throughout.
	proxy := tcpproxy.Start(t, strings.TrimPrefix(url, "nats://"))
	_, ch, b := startWithHTTP(t, testConfig(t, "nats://"+proxy.Addr(), "client", "", memoryServices))
	defer b.RequireStop()
	base := "http://" + ch.Addr()
	if code, err := putKey(ctx, base, "k", "before"); err != nil || code != http.StatusNoContent {
		t.Fatalf("a PUT before: %d, %v", code, err)
	}

	proxy.Down()
	// The API's connection notices the broker is gone when it next reads;
	// a call sent before that is on its way already, as on any
	// connection. Once a call of another key is refused as unavailable,
	// the connection is known to be away.
	away := time.Now().Add(30 * time.Second)
	for {
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		code, err := putKey(pctx, base, "while-away", "x")
		pcancel()
		if err == nil && code == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(away) {
			t.Fatalf("no PUT was refused 503 in 30 s while the API could not reach the broker (last: %d, %v)", code, err)
		}
	}
	pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	code, err := putKey(pctx, base, "k", "stale")
	pcancel()
	if err == nil && code == http.StatusNoContent {
		t.Fatal("a PUT answered 204 while the API could not reach the broker")
	}
	if err := served.Services().KeyValue.Set(ctx, "k", []byte("new"), 0); err != nil {
		t.Fatal(err)
	}

	// The connection comes back. A PUT after the reconnect is answered
	// once whatever the connection sent before it has been: one
	// connection's messages keep their order.
	proxy.Up()
	for {
		code, err := putKey(ctx, base, "probe", "after")
		if err == nil && code == http.StatusNoContent {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no PUT went through after the reconnect: %d, %v", code, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got, err := served.Services().KeyValue.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "new" {
		t.Fatalf("the key holds %q after the API's connection came back, want %q: the PUT given up while it reconnected landed later", got, "new")
	}
}

// http.trusted_proxies, http.max_proxy_connections and
// http.max_connections_per_proxy reach the HTTP API: a trusted proxy's
// connections are not bounded as one client's, so it opens more than
// httpapi.MaxConnsPerClient, and more than a quarter of the proxies' most
// once its own most is all of theirs, and each is answered, up to the
// proxies' most, past which one is answered 503.
func TestTheTrustedProxiesReachTheHTTPAPI(t *testing.T) {
	const proxy = "127.0.9.1"
	const most = httpapi.MaxConnsPerClient + 1
	url := natstest.StartServer(t).ClientURL()
	cfg := testConfig(t, url, "serve", "", memoryServices)
	cfg.HTTP.TrustedProxies = []string{proxy}
	cfg.HTTP.MaxProxyConnections = most
	cfg.HTTP.MaxConnectionsPerProxy = most
	_, h, a := startWithHTTP(t, cfg)
	defer a.RequireStop()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(proxy)}, Timeout: 20 * time.Second}
	for i := range most + 1 {
		code, err := healthzOver(t, d, h.Addr())
		if err != nil {
			t.Fatalf("connection %d of a trusted proxy: %v", i+1, err)
		}
		if i == most {
			if code != http.StatusServiceUnavailable {
				t.Fatalf("connection %d of a trusted proxy, past the proxies' most of %d, answered %d, want 503", i+1, most, code)
			}
		} else if code != http.StatusOK {
			t.Fatalf("connection %d of a trusted proxy answered %d", i+1, code)
		}
	}
}

// http.max_client_connections reaches the HTTP API: the clients that are
// not trusted proxies, each within its own most, hold no more than it
// together, and one more, from a client holding none, is answered 503.
func TestTheClientsMostConnectionsReachTheHTTPAPI(t *testing.T) {
	const most = 3
	url := natstest.StartServer(t).ClientURL()
	cfg := testConfig(t, url, "serve", "", memoryServices)
	cfg.HTTP.MaxClientConnections = most
	_, h, a := startWithHTTP(t, cfg)
	defer a.RequireStop()
	for i := range most + 1 {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.9.%d", 10+i))}, Timeout: 20 * time.Second}
		code, err := healthzOver(t, d, h.Addr())
		if err != nil {
			t.Fatalf("connection of client %d: %v", i+1, err)
		}
		if i == most {
			if code != http.StatusServiceUnavailable {
				t.Fatalf("the connection of client %d, past the clients' most of %d, answered %d, want 503", i+1, most, code)
			}
		} else if code != http.StatusOK {
			t.Fatalf("the connection of client %d answered %d", i+1, code)
		}
	}
}

// healthzOver dials addr through d, keeps the connection open until the
// test ends, asks it for /healthz and returns the status it answered, or
// the error of reading the answer.
func healthzOver(t *testing.T, d *net.Dialer, addr string) (int, error) {
	t.Helper()
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
