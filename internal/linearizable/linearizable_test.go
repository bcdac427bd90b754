//go:build unix

package linearizable_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/enginetest"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/pgtest"
	"github.com/abi-engine/engine/internal/tcpproxy"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// setting is how hard the run pushes.
type setting struct {
	name    string
	lease   time.Duration
	rounds  int
	clients int
	// between is how many calls the clients complete between two faults.
	between int64
	// pace bounds the pause a client takes between two calls.
	pace time.Duration
	// callTimeout is how long a client waits for an answer: longer than a
	// pause of the holder, so the answers of a resumed engine are heard.
	callTimeout time.Duration
}

func linearizableSetting(t *testing.T) setting {
	switch v := os.Getenv("ENGINE_LINEARIZABLE"); v {
	case "", "short":
		return setting{name: "short", lease: 2 * time.Second, rounds: 1, clients: 5, between: 150, pace: 20 * time.Millisecond, callTimeout: 6 * time.Second}
	case "long":
		return setting{name: "long", lease: 2 * time.Second, rounds: 4, clients: 8, between: 600, pace: 10 * time.Millisecond, callTimeout: 6 * time.Second}
	case "off":
		t.Skip("ENGINE_LINEARIZABLE=off")
	default:
		t.Fatalf("ENGINE_LINEARIZABLE=%q: want short, long or off", v)
	}
	return setting{}
}

// The shared keys every client calls: few, so calls collide.
var (
	kvKeys     = []string{"k0", "k1", "k2"}
	docIDs     = []string{"d0", "d1"}
	collection = "linearizable"
)

// lateClientsPerFault is how many late clients a pause or a stalled
// deploy runs (pause, deploy). More would make the check of a history
// that is not linearizable take minutes: their calls at the old holder
// all overlap.
const lateClientsPerFault = 10

// probeKey is the key the i-th late client of a fault sets and reads
// back, and no other client writes: a write of a key that reaches the old
// holder ahead of a read makes it read that key afresh, so each late
// client's reads there come after none but its own writes, answered.
func probeKey(i int) string { return fmt.Sprintf("probe%d", i) }

// drain is how long an engine drains its calls when it stops (the
// configuration's drain_seconds); a stalled deploy lets the holder's
// accepting connection go within half of it, so the drain ends in time.
const drain = 5 * time.Second

var engineBin string

func TestMain(m *testing.M) { os.Exit(enginetest.Main(m, &engineBin)) }

func TestLinearizable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs engine processes through deploys, a pause and a crash for about fifteen seconds")
	}
	set := linearizableSetting(t)
	w := newWorld(t, set)

	holder := w.start("v1", w.plain)
	holder.waitStarted(t)
	w.waitState(holder, domain.StateServing)
	w.prepare()
	w.startClients()
	w.waitCalls()

	release := 1
	for round := range set.rounds {
		// The first deploy of a round hands over as it comes; in the
		// second, the holder's accepting connection stalls across the
		// handover.
		for _, stalled := range []bool{false, true} {
			release++
			holder = w.deploy(holder, fmt.Sprintf("v%d", release), stalled)
			w.waitCalls()
		}
		// The engine that takes over from a paused or killed holder is a
		// hot standby of its release, and in every other round a standby
		// of the next release, which takes over the same way.
		takeover := func() (string, string) {
			if round%2 == 0 {
				return holder.release, w.hot
			}
			release++
			return fmt.Sprintf("v%d", release), w.plain
		}
		holder = w.pause(holder, w.standby(takeover()))
		w.waitCalls()
		holder = w.crash(holder, w.standby(takeover()))
		w.waitCalls()
		t.Logf("round %d done: %d calls", round+1, w.rec.calls.Load())
	}
	w.stopClients()

	w.rec.summary(t, set)
	t.Logf("engine transitions, by the state moved to: %s", w.ev.transitions())
	t.Logf("answers the engines sent, retries included, by status: %s", w.answers.counts())
	w.check("keyvalue", kvModel, w.rec.kv)
	w.check("document", docModel, w.rec.doc)
}

// world is the broker, the engines, the event watch and the clients.
type world struct {
	t      *testing.T
	set    setting
	broker *server.Server
	url    string
	// proxy carries the engines' connections to the broker, so one can
	// be stalled; the test's own connections go to the broker directly.
	proxy *tcpproxy.Proxy
	plain string // configuration of an engine that stands by for another release only
	hot   string // the same with hot_standby, for a standby of the holder's release
	ev    *events
	// answers counts every answer an engine sent a client, by status, the
	// 503s the facade sent again included.
	answers *answers
	rec     *recorder

	mu       sync.Mutex
	engines  []*engine
	marks    []porcupine.Annotation
	evidence string // where a failure's drawings and logs go

	stop     chan struct{}
	stopOnce sync.Once
	clients  sync.WaitGroup
	// ids hands out porcupine's client ids: one per client, and a new one
	// each time a client's call ends with an unknown outcome.
	ids atomic.Int64
}

func newWorld(t *testing.T, set setting) *world {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL", false)
	table := pgtest.Table(t, dsn, "linearizable", "_kv", "_doc", "_doc_collections")
	w := &world{t: t, set: set, stop: make(chan struct{}), rec: newRecorder()}
	// The broker outlives every engine: it is the test's, not theirs.
	w.broker = natstest.StartServer(t)
	w.url = w.broker.ClientURL()
	w.proxy = tcpproxy.Start(t, strings.TrimPrefix(w.url, "nats://"))
	w.ev = watchEvents(t, natstest.Connect(t, w.url))
	w.answers = watchAnswers(t, natstest.Connect(t, w.url))
	dir := t.TempDir()
	w.plain = writeConfig(t, dir, "engine.yaml", "nats://"+w.proxy.Addr(), set.lease, false, dsn, table)
	w.hot = writeConfig(t, dir, "hot.yaml", "nats://"+w.proxy.Addr(), set.lease, true, dsn, table)
	t.Cleanup(func() {
		w.stopClients()
		w.mu.Lock()
		engines := w.engines
		w.mu.Unlock()
		for _, e := range engines {
			e.kill()
		}
		if t.Failed() {
			w.keepLogs()
		}
	})
	return w
}

// writeConfig writes an engine configuration whose keyvalue and document
// services are the test's PostgreSQL tables, shared as a deploy needs.
func writeConfig(t *testing.T, dir, name, url string, lease time.Duration, hot bool, dsn, table string) string {
	t.Helper()
	yaml := fmt.Sprintf(`nats:
  url: %s
  engine: {lease_seconds: %d, drain_seconds: %d, hot_standby: %t}
http: {listen: "127.0.0.1:0"}
data_dir: %s
services:
  keyvalue: {adapter: postgres, config: {dsn: %q, table: %s_kv}}
  document: {adapter: postgres, config: {dsn: %q, table: %s_doc}}
  object_storage: {adapter: off}
  vector_store: {adapter: off}
  cache: {adapter: off}
  secret: {adapter: env}
`, url, int(lease/time.Second), int(drain/time.Second), hot, filepath.Join(dir, "data"), dsn, table, dsn, table)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// prepare creates the clients' document collection through the serving
// engine, before any call is recorded.
func (w *world) prepare() {
	ctx, cancel := context.WithTimeout(w.t.Context(), 30*time.Second)
	defer cancel()
	docs := natsclient.NewDocument(natsclient.New(natstest.Connect(w.t, w.url)))
	if err := docs.EnsureCollection(ctx, collection); err != nil {
		w.t.Fatalf("create collection %q: %v", collection, err)
	}
}

// start runs an engine of release with the configuration at config.
func (w *world) start(release, config string) *engine {
	w.t.Helper()
	e := startEngine(w.t, release, config)
	w.mu.Lock()
	w.engines = append(w.engines, e)
	w.mu.Unlock()
	return e
}

// standby starts an engine of release and waits until it stands by.
func (w *world) standby(release, config string) *engine {
	w.t.Helper()
	e := w.start(release, config)
	e.waitStarted(w.t)
	w.waitState(e, domain.StateStandby)
	return e
}

// deploy stands the next release by, stops the holder with SIGTERM and
// waits until the next release serves and the old engine exited 0.
//
// Handed over as it comes, the holder stops accepting calls as soon as
// it has written its release, before its successor can have answered
// one: no call sent after the successor wrote reaches it. With stalled,
// the holder's accepting connection stalls, both ways, from before the
// SIGTERM until a call of each late client (as in pause, but started once
// next has subscribed) waits on it, or half the drain has passed. Its end of its subscriptions waits there
// too, so the broker goes on handing calls to the holder after it has
// released the lease and next serves, as it does to an engine whose
// connection is slow; next answers some of the late clients' sets first,
// and the holder drains the calls it was handed once its connection
// moves again. Among them are reads of a
// probe key sent after next answered its client's set; the holder read
// the key under its term, so, were it to answer them from what it kept
// of that term, it would answer with a value its successor had
// overwritten.
func (w *world) deploy(holder *engine, release string, stalled bool) *engine {
	w.t.Helper()
	next := w.standby(release, w.plain)
	if stalled {
		w.readProbeKeys()
		accept := acceptName(holder)
		w.proxy.BlockNamed(accept)
		w.mark("stall "+holder.release, holder)
		parked := w.mustDeliver(holder)
		w.signal(holder, syscall.SIGTERM)
		sent := time.Now()
		w.waitState(next, domain.StateServing)
		w.waitAccepting(next)
		// The clients that were not waiting at the holder already are,
		// as a rule, the late clients alone: each sends it one call.
		before := w.mustDeliver(holder)
		n := lateClientsPerFault
		late := w.startLateClients(n)
		w.t.Cleanup(late.stop)
		after := before
		w.waitUntil(sent.Add(drain/2), func() bool {
			d, ok := w.delivered(holder)
			if !ok {
				return true // it has stopped accepting: the drain ran out
			}
			after = d
			return after-before >= int64(n)
		})
		w.proxy.UnblockNamed(accept)
		w.mark("let go "+holder.release, holder)
		w.t.Logf("%d calls waited at the stalled %s when it was let go %v after SIGTERM, %d of them sent after %s served, with %d late clients",
			after-parked, holder, time.Since(sent).Round(time.Millisecond), after-before, next, n)
		defer late.stop()
	} else {
		w.signal(holder, syscall.SIGTERM)
		w.waitState(next, domain.StateServing)
	}
	if code := holder.exitCode(w.t); code != 0 {
		w.t.Fatalf("%s exited %d after SIGTERM:\n%s", holder, code, holder.output())
	}
	return next
}

// pause stops the holder past its lease: SIGSTOP until next, standing by,
// serves and a call of each late client (below) waits at the paused
// holder; then SIGCONT, and waits until the old engine has stopped
// serving by its own account (an event) or exited.
//
// Every client is waiting by then on a call the holder took before it was
// stopped, sent before next served, which the holder may still answer
// when it resumes (ADR 0012). The calls sent after the takeover come from
// late clients, which run through the pause only: each sets its probe key
// and reads it back again and again, and the broker hands each call to
// either engine. Next answers some, and each late client comes to wait on
// one at the paused holder, which, resumed, must refuse it. Among them are
// reads sent after next answered a set; the holder read the probe keys
// before it was stopped, so, were it to answer them, it could answer with
// what it kept of its old term.
func (w *world) pause(holder, next *engine) *engine {
	w.t.Helper()
	w.readProbeKeys()
	w.signal(holder, syscall.SIGSTOP)
	stopped := time.Now()
	w.waitState(next, domain.StateServing)
	w.waitAccepting(next)
	w.t.Logf("%s serves %v after the holder was stopped", next, time.Since(stopped).Round(time.Millisecond))
	parked, n := w.mustDeliver(holder), lateClientsPerFault
	late := w.startLateClients(n)
	w.t.Cleanup(late.stop)
	w.waitFor(fmt.Sprintf("a call of each of %d late clients to reach the paused %s", n, holder), func() bool {
		return w.mustDeliver(holder) >= parked+int64(n)
	})
	w.signal(holder, syscall.SIGCONT)
	w.waitFor(holder.String()+" to stop serving after it was resumed", func() bool {
		return holder.exited() || w.ev.state(holder.instanceID()) != domain.StateServing.String()
	})
	late.stop()
	return next
}

// readProbeKeys sets each probe key and reads it back, through the
// engine that serves: what a keyvalue store keeps of the reads of its
// term, it keeps of these keys. A call not answered ends it; the calls
// are recorded as any other.
func (w *world) readProbeKeys() {
	w.t.Helper()
	c := w.newClient(w.stop)
	for i := range lateClientsPerFault {
		c.seq++
		key := probeKey(i)
		for _, in := range []kvInput{{op: kvSet, key: key, value: c.value()}, {op: kvGet, key: key}, {op: kvGet, key: key}} {
			ctx, cancel := context.WithTimeout(w.t.Context(), w.set.callTimeout)
			answered := c.kvDo(ctx, in)
			cancel()
			if !answered {
				w.t.Logf("%v through the serving engine was not answered; the fault goes on", in)
				return
			}
		}
	}
}

// delivered is how many messages the broker has sent e's connection that
// accepts calls: every call routed to it, answered or not; false when e
// has no such connection.
func (w *world) delivered(e *engine) (int64, bool) {
	w.t.Helper()
	connz, err := w.broker.Connz(&server.ConnzOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, c := range connz.Conns {
		if c.Name == acceptName(e) {
			return c.OutMsgs, true
		}
	}
	return 0, false
}

// mustDeliver is delivered of an engine that accepts calls.
func (w *world) mustDeliver(e *engine) int64 {
	w.t.Helper()
	n, ok := w.delivered(e)
	if !ok {
		w.t.Fatalf("%s has no connection that accepts calls", e)
	}
	return n
}

// waitAccepting waits until the broker can hand e the late clients'
// calls: e's connection that accepts calls has subscribed to the keyvalue
// set and get. An engine tells that it serves before it has subscribed;
// late clients started in between have their first calls, their sets,
// all handed to the stalled holder, and none of them reads back through
// the holder a value its successor wrote.
func (w *world) waitAccepting(e *engine) {
	w.t.Helper()
	want := []string{wire.Subject(ports.ServiceKeyValue, wire.KVSet), wire.Subject(ports.ServiceKeyValue, wire.KVGet)}
	w.waitFor(fmt.Sprintf("%s to subscribe to %s", e, strings.Join(want, " and ")), func() bool {
		connz, err := w.broker.Connz(&server.ConnzOptions{Subscriptions: true})
		if err != nil {
			w.t.Fatal(err)
		}
		for _, c := range connz.Conns {
			if c.Name == acceptName(e) {
				return slices.Contains(c.Subs, want[0]) && slices.Contains(c.Subs, want[1])
			}
		}
		return false
	})
}

// acceptName is the name of e's connection that accepts calls.
func acceptName(e *engine) string { return "abi-engine accept " + e.instanceID() }

// crash kills the holder; next, standing by, takes over after a lease of
// silence.
func (w *world) crash(holder, next *engine) *engine {
	w.t.Helper()
	w.signal(holder, syscall.SIGKILL)
	killed := time.Now()
	holder.exitCode(w.t)
	w.waitState(next, domain.StateServing)
	w.t.Logf("%s serves %v after the holder was killed", next, time.Since(killed).Round(time.Millisecond))
	return next
}

// signal sends sig to e and marks the moment in the history.
func (w *world) signal(e *engine, sig syscall.Signal) {
	w.t.Helper()
	at := w.rec.now()
	if err := e.cmd.Process.Signal(sig); err != nil {
		w.t.Fatalf("%s %s: %v", sig, e, err)
	}
	name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGSTOP: "SIGSTOP", syscall.SIGCONT: "SIGCONT", syscall.SIGKILL: "SIGKILL"}[sig]
	w.t.Logf("%s %s", name, e)
	w.markAt(at, name+" "+e.release, e)
}

// mark marks what happened to e now in the history.
func (w *world) mark(what string, e *engine) { w.markAt(w.rec.now(), what, e) }

func (w *world) markAt(at int64, what string, e *engine) {
	w.mu.Lock()
	w.marks = append(w.marks, porcupine.Annotation{Tag: "engines", Start: at, Description: what, Details: e.String()})
	w.mu.Unlock()
}

// waitState waits until e's latest event says it is in state.
func (w *world) waitState(e *engine, state domain.State) {
	w.t.Helper()
	w.waitFor(fmt.Sprintf("%s to be %s", e, state), func() bool {
		if e.exited() {
			w.t.Fatalf("%s exited while the test waited for it to be %s:\n%s", e, state, e.output())
		}
		return w.ev.state(e.instanceID()) == state.String()
	})
}

// waitFor polls cond until it holds, for a minute at most.
func (w *world) waitFor(what string, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("waited a minute for %s\n%s", what, w.tails())
		}
		select {
		case <-w.ev.changed():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitUntil polls cond until it holds or deadline passes.
func (w *world) waitUntil(deadline time.Time, cond func() bool) {
	for !cond() && time.Now().Before(deadline) {
		select {
		case <-w.ev.changed():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitCalls lets the clients complete set.between more calls.
func (w *world) waitCalls() {
	w.t.Helper()
	target := w.rec.calls.Load() + w.set.between
	w.waitFor(fmt.Sprintf("%d calls to complete", w.set.between), func() bool { return w.rec.calls.Load() >= target })
}

func (w *world) tails() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, e := range w.engines {
		fmt.Fprintf(&b, "--- %s\n%s", e, e.tail(15))
	}
	return b.String()
}

// keepLogs writes every engine's log where the visualization goes.
func (w *world) keepLogs() {
	dir := w.failureDir()
	w.mu.Lock()
	engines := w.engines
	w.mu.Unlock()
	for i, e := range engines {
		path := filepath.Join(dir, fmt.Sprintf("engine-%d-%s.log", i+1, e.release))
		if err := os.WriteFile(path, []byte(e.output()), 0o644); err == nil {
			w.t.Logf("log of %s: %s", e, path)
		}
	}
}

// failureDir is where a failing run leaves its evidence: the test's
// artifact directory with -artifacts, otherwise a directory of its own
// that outlives the test, since the evidence is for reading after it.
func (w *world) failureDir() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.evidence != "" {
		return w.evidence
	}
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		w.evidence = w.t.ArtifactDir()
		return w.evidence
	}
	dir, err := os.MkdirTemp("", "linearizable-")
	if err != nil {
		w.t.Logf("no directory for the evidence: %v; using the artifact directory", err)
		dir = w.t.ArtifactDir()
	}
	w.evidence = dir
	return dir
}

// check runs porcupine over one service's history; when it is not
// linearizable, the visualization is written and the test fails.
func (w *world) check(name string, model porcupine.Model, history []porcupine.Operation) {
	w.t.Helper()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, history, 2*time.Minute)
	w.t.Logf("%s: %d calls checked in %v: %s", name, len(history), time.Since(start).Round(time.Millisecond), res)
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		w.t.Errorf("%s: porcupine could not decide on %d calls in 2 minutes", name, len(history))
		return
	}
	w.mu.Lock()
	info.AddAnnotations(w.marks)
	w.mu.Unlock()
	path := filepath.Join(w.failureDir(), name+".html")
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		w.t.Errorf("%s: the history is not linearizable, and drawing it failed: %v", name, err)
		return
	}
	w.t.Errorf("%s: the history of %d calls is not linearizable: no order of the calls within their times explains every answer; "+
		"porcupine's drawing of it (the longest orders that work, and where they break) is %s", name, len(history), path)
}

// startClients runs set.clients clients until stopClients.
func (w *world) startClients() {
	for range w.set.clients {
		w.clients.Go(w.newClient(w.stop).run)
	}
	// Before their connections close, which were registered earlier.
	w.t.Cleanup(w.stopClients)
}

// newClient makes a client, with a connection of its own, that calls
// until stop closes.
func (w *world) newClient(stop <-chan struct{}) *client {
	id := w.newID()
	nc := natstest.Connect(w.t, w.url, nats.CustomInboxPrefix(clientInbox))
	c := natsclient.New(nc, natsclient.WithTimeout(w.set.callTimeout))
	return &client{
		w: w, i: id, id: id, stop: stop, versions: map[string]uint64{}, stale: map[string]bool{},
		kv: natsclient.NewKeyValue(c), docs: natsclient.NewDocument(c),
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(id))),
	}
}

func (w *world) newID() int { return int(w.ids.Add(1) - 1) }

// lateClients are probing clients started during a fault, and stopped
// with it.
type lateClients struct {
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// startLateClients runs n probing clients until the returned clients' stop.
func (w *world) startLateClients(n int) *lateClients {
	late := &lateClients{done: make(chan struct{})}
	for i := range n {
		c := w.newClient(late.done)
		c.probe = probeKey(i)
		late.wg.Go(c.run)
	}
	return late
}

func (l *lateClients) stop() {
	l.once.Do(func() { close(l.done) })
	l.wg.Wait()
}

func (w *world) stopClients() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.clients.Wait()
}

// client calls the keyvalue and document services one call at a time.
type client struct {
	w    *world
	i    int
	id   int // porcupine's client id: a new one after an unknown outcome
	stop <-chan struct{}
	// probe is the key the client only sets and reads back (probeCall);
	// "" for a client of the shared keys. wrote: a set of it was answered.
	probe string
	wrote bool
	kv    natsclient.KeyValue
	docs  natsclient.Document
	rng   *rand.Rand
	seq   int
	// versions is the last version this client saw of each document, the
	// one its next put or delete is conditional on; stale marks a document
	// whose conditional write was refused, read before the next write.
	versions map[string]uint64
	stale    map[string]bool
}

func (c *client) run() {
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		c.seq++
		if c.probe != "" {
			c.probeCall()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), c.w.set.callTimeout)
			if c.rng.IntN(10) < 6 {
				c.kvCall(ctx)
			} else {
				c.docCall(ctx)
			}
			cancel()
		}
		select {
		case <-c.stop:
			return
		case <-time.After(time.Duration(c.rng.Int64N(int64(c.w.set.pace) + 1))):
		}
	}
}

func (c *client) value() string { return fmt.Sprintf("c%d.%d", c.i, c.seq) }

func (c *client) kvCall(ctx context.Context) {
	in := kvInput{key: kvKeys[c.rng.IntN(len(kvKeys))]}
	switch n := c.rng.IntN(20); {
	case n < 8:
		in.op = kvGet
	case n < 13:
		in.op, in.value = kvSet, c.value()
	case n < 17:
		in.op, in.value = kvSetIfAbsent, c.value()
	default:
		in.op = kvDelete
	}
	c.kvDo(ctx, in)
}

// probeCall sets the client's probe key until a set is answered, and
// from then on reads it back: reads sent after a write was answered,
// which must see that write, whichever engine the broker hands them to.
// It writes once only: a write that reaches the old holder after the
// takeover is refused by the fence, which ends the old term in the
// holder's store, and the holder's reads after it read the table.
func (c *client) probeCall() {
	in := kvInput{op: kvGet, key: c.probe}
	if !c.wrote {
		in = kvInput{op: kvSet, key: c.probe, value: c.value()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.w.set.callTimeout)
	answered := c.kvDo(ctx, in)
	cancel()
	c.wrote = c.wrote || answered && in.op == kvSet
}

// kvDo makes the keyvalue call in and records it. It reports whether the
// call was answered.
func (c *client) kvDo(ctx context.Context, in kvInput) bool {
	var out kvOutput
	var err error
	r := c.w.rec
	call := r.now()
	switch in.op {
	case kvGet:
		var v []byte
		v, err = c.kv.Get(ctx, in.key)
		if errors.Is(err, ports.ErrNotFound) {
			err = nil
		} else if err == nil {
			out.found, out.value = true, string(v)
		}
	case kvSet:
		err = c.kv.Set(ctx, in.key, []byte(in.value), 0)
	case kvSetIfAbsent:
		out.ok, err = c.kv.SetIfAbsent(ctx, in.key, []byte(in.value), 0)
	case kvDelete:
		out.ok, err = c.kv.Delete(ctx, in.key)
	}
	c.record(&r.kv, call, r.now(), in, out, kvOutput{unknown: true}, err, in.op == kvGet)
	return err == nil
}

func (c *client) docCall(ctx context.Context) {
	in := docInput{id: docIDs[c.rng.IntN(len(docIDs))]}
	in.ifVersion = c.versions[in.id]
	var out docOutput
	var err error
	r := c.w.rec
	call := r.now()
	switch n := c.rng.IntN(10); {
	case n < 3 || c.stale[in.id]:
		in.op = docGet
		var d ports.Document
		d, err = c.docs.Get(ctx, collection, in.id)
		switch {
		case errors.Is(err, ports.ErrNotFound):
			err, out.notFound = nil, true
			c.versions[in.id], c.stale[in.id] = 0, false
		case err == nil:
			v, _ := d.Data["v"].(string)
			out.found, out.version, out.value = true, d.Version, v
			c.versions[in.id], c.stale[in.id] = d.Version, false
		}
	case n < 9:
		in.op, in.value = docPut, c.value()
		var d ports.Document
		d, err = c.docs.Put(ctx, collection, in.id, map[string]any{"v": in.value}, ports.IfVersion(in.ifVersion))
		switch {
		case errors.Is(err, ports.ErrConflict):
			err, out.conflict = nil, true
			c.stale[in.id] = true
		case err == nil:
			out.found, out.version = true, d.Version
			c.versions[in.id] = d.Version
		}
	default:
		in.op = docDelete
		err = c.docs.Delete(ctx, collection, in.id, ports.IfVersion(in.ifVersion))
		switch {
		case errors.Is(err, ports.ErrConflict):
			err, out.conflict = nil, true
			c.stale[in.id] = true
		case errors.Is(err, ports.ErrNotFound):
			err, out.notFound = nil, true
			c.versions[in.id] = 0
		case err == nil:
			c.versions[in.id] = 0
		}
	}
	if c.record(&r.doc, call, r.now(), in, out, docOutput{unknown: true}, err, in.op == docGet) {
		c.stale[in.id] = true
	}
}

// record files a call by its error: answered, it is recorded as it was;
// refused with 503, it is left out; a read without an answer is left out;
// a write without a definite answer is recorded with the output unknown
// and no return, and the client goes on under a new porcupine id (the old
// one's call never ends). It reports whether the outcome is unknown.
func (c *client) record(history *[]porcupine.Operation, call, ret int64, in, out, unknown any, err error, read bool) bool {
	r := c.w.rec
	r.calls.Add(1)
	if took := time.Duration(ret - call); took > c.w.set.lease {
		r.slow.Add(1)
	}
	switch {
	case err == nil:
		r.add(history, op(c.id, call, ret, in, out), nil)
	case errors.Is(err, wire.ErrUnavailable):
		r.refused.Add(1)
	case errors.Is(err, ports.ErrInvalidArgument), errors.Is(err, ports.ErrNotFound), errors.Is(err, ports.ErrConflict),
		errors.Is(err, ports.ErrTooLarge), errors.Is(err, wire.ErrUnauthorized):
		r.unexpected(fmt.Sprintf("client %d: %v: %v", c.i, in, err))
	case read:
		r.unanswered.Add(1)
	default:
		r.unknown.Add(1)
		r.add(history, op(c.id, call, math.MaxInt64, in, unknown), err)
		c.id = c.w.newID()
		return true
	}
	return false
}

// recorder holds the history of both services, on one clock.
type recorder struct {
	start      time.Time
	calls      atomic.Int64
	refused    atomic.Int64
	unknown    atomic.Int64
	unanswered atomic.Int64
	// slow counts the calls that took longer than a lease: they waited
	// through a fault.
	slow atomic.Int64

	mu      sync.Mutex
	kv, doc []porcupine.Operation
	odd     []string
	errs    map[string]int    // why outcomes were unknown: a count by kind
	example map[string]string // and the first error of each kind
}

func newRecorder() *recorder {
	return &recorder{start: time.Now(), errs: map[string]int{}, example: map[string]string{}}
}

// now is the time since the recording began, on the monotonic clock.
func (r *recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *recorder) add(history *[]porcupine.Operation, o porcupine.Operation, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		o.Metadata = callInfo{client: o.ClientId, err: err.Error()}
		kind := kindOf(err)
		if r.errs[kind]++; r.example[kind] == "" {
			r.example[kind] = err.Error()
		}
	}
	*history = append(*history, o)
}

func (r *recorder) unexpected(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.odd = append(r.odd, s)
}

// kindOf names an error by its kind, not its text, for the summary.
func kindOf(err error) string {
	var remote *wire.RemoteError
	switch {
	case errors.As(err, &remote):
		return fmt.Sprintf("answered %d", remote.Code)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "no answer in time"
	}
	return "other: " + err.Error()
}

func (r *recorder) summary(t *testing.T, set setting) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Logf("linearizable %s: lease %v, %d rounds, %d clients: %d calls, %d keyvalue and %d document recorded, %d refused with 503 (left out), %d writes of unknown outcome %v, %d reads unanswered (left out); %d calls took longer than a lease",
		set.name, set.lease, set.rounds, set.clients, r.calls.Load(), len(r.kv), len(r.doc), r.refused.Load(), r.unknown.Load(), r.errs, r.unanswered.Load(), r.slow.Load())
	for kind, example := range r.example {
		t.Logf("unknown outcome, %s, such as: %s", kind, example)
	}
	for _, s := range r.odd {
		t.Errorf("an answer no call should get: %s", s)
	}
	// The check means something only if every key saw answered writes and
	// reads.
	type count struct{ reads, writes int }
	seen := map[string]*count{}
	keys := append(append([]string{}, kvKeys...), docIDs...)
	for i := range lateClientsPerFault {
		keys = append(keys, probeKey(i))
	}
	for _, k := range keys {
		seen[k] = &count{}
	}
	tally := func(key string, read bool) {
		if read {
			seen[key].reads++
		} else {
			seen[key].writes++
		}
	}
	for _, o := range r.kv {
		if in := o.Input.(kvInput); o.Return != math.MaxInt64 {
			tally(in.key, in.op == kvGet)
		}
	}
	for _, o := range r.doc {
		if in := o.Input.(docInput); o.Return != math.MaxInt64 {
			tally(in.id, in.op == docGet)
		}
	}
	for k, n := range seen {
		if n.reads == 0 || n.writes == 0 {
			t.Errorf("key %s: %d reads and %d writes answered; the load did not reach it", k, n.reads, n.writes)
		}
	}
}

// events follows every engine's lease transitions on wire.EventsSubject.
type events struct {
	mu     sync.Mutex
	states map[string]string // instance id -> latest state
	counts map[string]int    // transitions seen, by the state moved to
	wake   chan struct{}     // closed and replaced on every event
}

func watchEvents(t *testing.T, nc *nats.Conn) *events {
	ev := &events{states: map[string]string{}, counts: map[string]int{}, wake: make(chan struct{})}
	_, err := nc.Subscribe(wire.EventsSubject, func(m *nats.Msg) {
		var e wire.EngineEvent
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Errorf("an undecodable engine event: %q", m.Data)
			return
		}
		ev.mu.Lock()
		ev.states[e.InstanceID] = e.To
		ev.counts[e.To]++
		close(ev.wake)
		ev.wake = make(chan struct{})
		ev.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ev
}

func (ev *events) state(instance string) string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return ev.states[instance]
}

func (ev *events) transitions() string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return fmt.Sprint(ev.counts)
}

func (ev *events) changed() <-chan struct{} {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return ev.wake
}

// clientInbox starts the reply subjects of the clients' calls, apart from
// the engines' own (their lease's JetStream requests), and under _INBOX.,
// the only subjects an engine answers on.
const clientInbox = "_INBOX.linearizable_client"

// answers counts the engines' answers to the clients' calls: their reply
// subjects are plain subjects, so a subscription to all of them sees each
// answer too, and its status. The broker's "no responders" goes to the
// caller alone and is not counted.
type answers struct {
	mu     sync.Mutex
	byCode map[string]int
}

func watchAnswers(t *testing.T, nc *nats.Conn) *answers {
	a := &answers{byCode: map[string]int{}}
	_, err := nc.Subscribe(clientInbox+".>", func(m *nats.Msg) {
		code := m.Header.Get(wire.ErrorCodeHeader)
		if code == "" {
			code = "200"
		}
		a.mu.Lock()
		a.byCode[code]++
		a.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *answers) counts() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprint(a.byCode)
}

// engine is one engine process.
type engine struct {
	release string
	cmd     *exec.Cmd
	started chan struct{} // closed when it logs that it started
	done    chan struct{} // closed when it exited

	mu       sync.Mutex
	instance string
	lines    []string
}

var instanceAttr = regexp.MustCompile(`\binstance=(\S+)`)

func startEngine(t *testing.T, release, config string) *engine {
	t.Helper()
	cmd := exec.Command(engineBin, "--config", config)
	cmd.Env = append(os.Environ(), "ABI_ROLLOUT_ID="+release)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{release: release, cmd: cmd, started: make(chan struct{}), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start engine %s: %v", release, err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		started := false
		for sc.Scan() {
			line := sc.Text()
			e.mu.Lock()
			e.lines = append(e.lines, line)
			if m := instanceAttr.FindStringSubmatch(line); m != nil && e.instance == "" {
				e.instance = m[1]
			}
			e.mu.Unlock()
			if !started && strings.Contains(line, "engine started") {
				started = true
				close(e.started)
			}
		}
		_ = cmd.Wait()
		close(e.done)
	}()
	return e
}

func (e *engine) String() string {
	return fmt.Sprintf("engine %s (pid %d, instance %s)", e.release, e.cmd.Process.Pid, e.instanceID())
}

func (e *engine) instanceID() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.instance
}

func (e *engine) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-e.started:
	case <-e.done:
		t.Fatalf("%s exited before it started:\n%s", e, e.output())
	case <-time.After(time.Minute):
		t.Fatalf("%s did not start in a minute:\n%s", e, e.output())
	}
}

func (e *engine) exited() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

func (e *engine) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-e.done:
		return e.cmd.ProcessState.ExitCode()
	case <-time.After(time.Minute):
		t.Fatalf("%s did not exit in a minute:\n%s", e, e.output())
	}
	return -1
}

// kill ends the process if it still runs, a stopped one included.
func (e *engine) kill() {
	_ = e.cmd.Process.Kill()
	<-e.done
}

func (e *engine) output() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.lines, "\n") + "\n"
}

func (e *engine) tail(n int) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.lines[max(0, len(e.lines)-n):], "\n") + "\n"
}
