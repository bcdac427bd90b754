//go:build unix

package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	leasejs "github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/enginetest"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/tcpproxy"
	"github.com/abi-engine/engine/internal/wire"
)

// setting is how hard the run pushes.
type setting struct {
	name    string
	lease   time.Duration
	rounds  int
	callers int
	// settle is how long traffic runs between a recovery and the next fault.
	settle time.Duration
	// recover bounds the wait for a recovery.
	recover time.Duration
}

func chaosSetting(t *testing.T) setting {
	switch v := os.Getenv("ENGINE_CHAOS"); v {
	case "", "short":
		return setting{name: "short", lease: time.Second, rounds: 1, callers: 4, settle: time.Second, recover: 60 * time.Second}
	case "normal":
		return setting{name: "normal", lease: 2 * time.Second, rounds: 3, callers: 8, settle: 3 * time.Second, recover: 60 * time.Second}
	case "off":
		t.Skip("ENGINE_CHAOS=off")
	default:
		t.Fatalf("ENGINE_CHAOS=%q: want short, normal or off", v)
	}
	return setting{}
}

var engineBin string

func TestMain(m *testing.M) { os.Exit(enginetest.Main(m, &engineBin)) }

// fault is one kind of fault: inject does it and undoes it, and returns
// when it was undone.
type fault struct {
	name   string
	inject func(w *world) (time.Time, error)
}

var faults = []fault{
	{"sigstop", func(w *world) (time.Time, error) {
		s, err := w.holderSlot()
		if err != nil {
			return time.Time{}, err
		}
		pid := s.pid()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return time.Time{}, err
		}
		time.Sleep(w.set.lease * 3 / 2)
		return time.Now(), syscall.Kill(pid, syscall.SIGCONT)
	}},
	{"cut", func(w *world) (time.Time, error) {
		s, err := w.holderSlot()
		if err != nil {
			return time.Time{}, err
		}
		for _, p := range s.proxies {
			p.Block()
		}
		time.Sleep(w.set.lease * 3 / 2)
		for _, p := range s.proxies {
			p.Unblock()
		}
		return time.Now(), nil
	}},
	{"delete-key", func(w *world) (time.Time, error) {
		ctx, cancel := w.ctx()
		defer cancel()
		err := w.kv.Delete(ctx, leasejs.Key)
		return time.Now(), err
	}},
	{"corrupt-key", func(w *world) (time.Time, error) {
		ctx, cancel := w.ctx()
		defer cancel()
		_, err := w.kv.Put(ctx, leasejs.Key, []byte("garbage{"))
		return time.Now(), err
	}},
	{"restart-leader", func(w *world) (time.Time, error) {
		ctx, cancel := w.ctx()
		defer cancel()
		stream, err := w.js.Stream(ctx, "KV_"+leasejs.DefaultBucket)
		if err != nil {
			return time.Time{}, err
		}
		info, err := stream.Info(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if info.Cluster == nil {
			return time.Time{}, fmt.Errorf("the lease stream reports no cluster")
		}
		for i, n := range w.cluster.nodes {
			if n.name == info.Cluster.Leader {
				return time.Now(), w.cluster.restart(i)
			}
		}
		return time.Time{}, fmt.Errorf("no node named %q leads the lease stream", info.Cluster.Leader)
	}},
	{"restart-broker", func(w *world) (time.Time, error) {
		return time.Now(), w.cluster.restart(0, 1, 2)
	}},
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster and three engines for about a minute")
	}
	set := chaosSetting(t)
	w := newWorld(t, set)
	w.startEngines()
	w.startCallers()

	w.phase.Store(warmUp)
	if err := w.waitRecovery(time.Now()); err != nil {
		t.Fatalf("the engines never served: %v\n%s", err, w.logs())
	}
	w.recovered.Store(true)
	time.Sleep(set.settle)

run:
	for round := range set.rounds {
		for i, f := range faults {
			w.recovered.Store(false)
			w.phase.Store(int32(i))
			w.stats[i].injected++
			w.stats[i].restartsBefore += w.starts()
			undone, err := f.inject(w)
			if err != nil {
				t.Errorf("round %d: inject %s: %v", round+1, f.name, err)
				break run
			}
			if err := w.waitRecovery(undone); err != nil {
				t.Errorf("round %d: no recovery from %s in %v: %v\n%s", round+1, f.name, set.recover, err, w.logs())
				break run
			}
			w.recovered.Store(true)
			time.Sleep(set.settle)
			w.stats[i].restartsAfter += w.starts()
		}
	}
	w.stopCallers()

	t.Logf("chaos %s: lease %v, %d rounds, %d callers", set.name, set.lease, set.rounds, set.callers)
	for i := range len(faults) + 1 {
		st := &w.stats[i]
		name := "warm-up"
		if i < len(faults) {
			name = faults[i].name
		}
		t.Logf("fault=%-14s injected=%d calls=%d failed=%d failed_after_recovery=%d max_latency_ms=%.1f overlaps=%d stale=%d restarts=%d",
			name, st.injected, st.calls, st.failed, st.failedAfterRecovery, float64(st.maxLatency)/float64(time.Millisecond),
			st.overlaps, st.stale, st.restartsAfter-st.restartsBefore)
		if st.overlaps != 0 || st.stale != 0 || st.failedAfterRecovery != 0 {
			t.Errorf("%s: %d overlaps, %d stale answers, %d calls failed after recovery", name, st.overlaps, st.stale, st.failedAfterRecovery)
		}
	}
	for _, v := range w.obs.violations() {
		t.Error(v)
	}
	if w.stats[warmUp].calls == 0 {
		t.Error("no call was made")
	}
}

// warmUp is the phase before the first fault; its stats are the last.
var warmUp = int32(len(faults))

// stats are one fault's figures over every round.
type stats struct {
	injected            int
	calls               int
	failed              int
	failedAfterRecovery int
	maxLatency          time.Duration
	overlaps            int
	stale               int
	restartsBefore      int
	restartsAfter       int
}

// world is the cluster, the engines, the observer and the traffic.
type world struct {
	t       *testing.T
	set     setting
	cluster *cluster
	slots   []*slot
	obs     *observer
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	lease   *leasejs.Lease

	phase     atomic.Int32
	recovered atomic.Bool
	mu        sync.Mutex
	stats     []stats

	stopTraffic chan struct{}
	stopOnce    sync.Once
	traffic     sync.WaitGroup
}

func newWorld(t *testing.T, set setting) *world {
	w := &world{t: t, set: set, stats: make([]stats, len(faults)+1), stopTraffic: make(chan struct{})}
	w.cluster = newCluster(t, natstest.StartCluster(t))
	nc := natstest.Connect(t, w.cluster.urls(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	w.obs = newObserver(t, nc, w)
	// Making the replicated bucket is set-up, not a call under test: on a
	// loaded machine a new stream's first election alone can take seconds.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lease, err := leasejs.Open(ctx, nc, leasejs.Options{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	w.lease = lease
	if w.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if w.kv, err = w.js.KeyValue(ctx, leasejs.DefaultBucket); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		w.slots = append(w.slots, newSlot(t, w, i))
	}
	return w
}

// ctx bounds one call to the broker.
func (w *world) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(w.t.Context(), 10*time.Second)
}

// startEngines starts the first engine alone, so it serves, then the two
// hot standbys; each is kept running until the test ends.
func (w *world) startEngines() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	w.t.Cleanup(func() {
		close(stop)
		for _, s := range w.slots {
			s.stop()
		}
		wg.Wait()
	})
	for i, s := range w.slots {
		wg.Go(func() { s.supervise(stop) })
		deadline := time.Now().Add(w.set.recover)
		for !s.isReady() {
			if time.Now().After(deadline) {
				w.t.Fatalf("engine %d did not start:\n%s", i, w.logs())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (w *world) starts() int {
	n := 0
	for _, s := range w.slots {
		n += int(s.starts.Load())
	}
	return n
}

// holderSlot is the slot whose running engine holds the lease.
func (w *world) holderSlot() (*slot, error) {
	ctx, cancel := w.ctx()
	defer cancel()
	rec, err := w.lease.Read(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range w.slots {
		if rec.Present && s.pid() == rec.Holder.PID {
			return s, nil
		}
	}
	return nil, fmt.Errorf("no running engine holds the lease (%+v)", rec)
}

// waitRecovery waits until every engine has started, one holds the lease
// and serves by its events, and it answered a call sent after since.
func (w *world) waitRecovery(since time.Time) error {
	deadline := time.Now().Add(w.set.recover)
	var why string
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		ready := 0
		for _, s := range w.slots {
			if s.isReady() {
				ready++
			}
		}
		if ready < len(w.slots) {
			why = fmt.Sprintf("%d of %d engines started", ready, len(w.slots))
			continue
		}
		ctx, cancel := w.ctx()
		rec, err := w.lease.Read(ctx)
		cancel()
		if err != nil || !rec.Present || rec.Holder.Released {
			why = fmt.Sprintf("lease %+v, %v", rec, err)
			continue
		}
		id := rec.Holder.InstanceID
		if !w.obs.serving(id) {
			why = "the holder " + id + " is not serving by its events"
			continue
		}
		if at, ok := w.obs.lastAnswer(id); !ok || !at.After(since) {
			why = "the holder " + id + " has not answered since the fault"
			continue
		}
		return nil
	}
	return fmt.Errorf("%s", why)
}

// startCallers calls abi.svc.engine.v1.info without pause from several
// goroutines, each call retried for up to 10 s.
func (w *world) startCallers() {
	for range w.set.callers {
		w.traffic.Go(func() {
			for {
				select {
				case <-w.stopTraffic:
					return
				default:
				}
				w.call()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	w.t.Cleanup(w.stopCallers)
}

func (w *world) stopCallers() {
	w.stopOnce.Do(func() { close(w.stopTraffic) })
	w.traffic.Wait()
}

// call is one logical call: attempts until one is answered or 10 s pass.
func (w *world) call() {
	phase, after := w.phase.Load(), w.recovered.Load()
	start := time.Now()
	ok := false
	for time.Since(start) < 10*time.Second {
		ans := w.obs.attempt(phase, time.Second)
		if ans.ok {
			ok = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	lat := time.Since(start)
	w.mu.Lock()
	defer w.mu.Unlock()
	st := &w.stats[phase]
	st.calls++
	if !ok {
		st.failed++
		if after {
			st.failedAfterRecovery++
		}
		return
	}
	st.maxLatency = max(st.maxLatency, lat)
}

func (w *world) violation(phase int32, overlap bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if overlap {
		w.stats[phase].overlaps++
	} else {
		w.stats[phase].stale++
	}
}

func (w *world) logs() string {
	var b strings.Builder
	for _, s := range w.slots {
		b.WriteString(s.tail())
	}
	return b.String()
}

// observer sends every call attempt and judges every answer against the
// events seen before it (see the package documentation).
type observer struct {
	t   *testing.T
	w   *world
	nc  *nats.Conn
	seq atomic.Uint64

	mu       sync.Mutex
	pending  map[uint64]*attempt
	views    map[string]*view
	answered map[string]time.Time // instance -> last answer
	found    []string
}

type attempt struct {
	phase int32
	sent  time.Time
	done  chan answer
}

type answer struct {
	ok       bool
	instance string
}

// view is what the observer last saw of one engine instance.
type view struct {
	state     string
	at        time.Time // when its latest event was seen
	servingAt time.Time // when its latest move to serving was seen
}

const replyPrefix = "_INBOX.chaos.reply."

func newObserver(t *testing.T, nc *nats.Conn, w *world) *observer {
	o := &observer{t: t, w: w, nc: nc, pending: map[uint64]*attempt{}, views: map[string]*view{}, answered: map[string]time.Time{}}
	// One channel for both subscriptions: nats.go fills it from the
	// connection's read loop, so the order is the broker's.
	ch := make(chan *nats.Msg, 1<<18)
	for _, subject := range []string{wire.EventsSubject, replyPrefix + ">"} {
		if _, err := nc.ChanSubscribe(subject, ch); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case m := <-ch:
				o.receive(m, time.Now())
			case <-quit:
				return
			}
		}
	}()
	t.Cleanup(func() {
		nc.Close()
		close(quit)
		<-done
	})
	return o
}

func (o *observer) receive(m *nats.Msg, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if m.Subject == wire.EventsSubject {
		var ev wire.EngineEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			o.found = append(o.found, fmt.Sprintf("an undecodable event: %q", m.Data))
			return
		}
		v := o.views[ev.InstanceID]
		if v == nil {
			v = &view{}
			o.views[ev.InstanceID] = v
		}
		v.state, v.at = ev.To, now
		if ev.To == domain.StateServing.String() {
			v.servingAt = now
		}
		return
	}
	seq, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, replyPrefix), 10, 64)
	a := o.pending[seq]
	if err != nil || a == nil {
		return
	}
	delete(o.pending, seq)
	var info wire.EngineInfoReply
	if m.Header.Get(wire.ErrorCodeHeader) != "" || len(m.Data) == 0 || json.Unmarshal(m.Data, &info) != nil {
		a.done <- answer{} // no responders, or 503 from an engine that does not serve: retried
		return
	}
	o.answered[info.InstanceID] = now
	o.judge(a, info.InstanceID)
	a.done <- answer{ok: true, instance: info.InstanceID}
}

// judge applies the two rules of the package documentation to an answer
// from id; o.mu is held.
func (o *observer) judge(a *attempt, id string) {
	v := o.views[id]
	serving := domain.StateServing.String()
	if v == nil || v.state != serving && v.at.Before(a.sent) {
		state := "never seen serving"
		if v != nil {
			state = "seen " + v.state + " " + a.sent.Sub(v.at).String() + " before the call"
		}
		o.found = append(o.found, fmt.Sprintf("stale: %s answered a call sent at %s while %s", id, a.sent.Format("15:04:05.000"), state))
		o.w.violation(a.phase, false)
		return
	}
	// Whether the other engine still serves when the answer comes does not
	// matter: it took the lease after A last did, so A, not seen to serve
	// again since, no longer held it when the call reached it.
	for other, ov := range o.views {
		if other != id && !ov.servingAt.IsZero() && ov.servingAt.Before(a.sent) && v.servingAt.Before(ov.servingAt) {
			o.found = append(o.found, fmt.Sprintf("overlap: %s answered a call sent at %s, %v after %s was seen serving",
				id, a.sent.Format("15:04:05.000"), a.sent.Sub(ov.servingAt), other))
			o.w.violation(a.phase, true)
			return
		}
	}
}

// attempt sends one request and waits up to timeout for its answer. An
// answer that comes later is still judged.
func (o *observer) attempt(phase int32, timeout time.Duration) answer {
	seq := o.seq.Add(1)
	a := &attempt{phase: phase, done: make(chan answer, 1)}
	o.mu.Lock()
	o.pending[seq] = a
	a.sent = time.Now()
	o.mu.Unlock()
	subject := wire.Subject(wire.ServiceEngine, wire.EngineInfo)
	if err := o.nc.PublishRequest(subject, replyPrefix+strconv.FormatUint(seq, 10), []byte("{}")); err != nil {
		return answer{}
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ans := <-a.done:
		return ans
	case <-t.C:
		return answer{}
	}
}

func (o *observer) serving(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	v := o.views[id]
	return v != nil && v.state == domain.StateServing.String()
}

func (o *observer) lastAnswer(id string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.answered[id]
	return at, ok
}

func (o *observer) violations() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.found
}

// slot is one engine's place: its proxies, its configuration, and the
// process running there now.
type slot struct {
	t       *testing.T
	i       int
	proxies []*tcpproxy.Proxy
	config  string
	logDir  string
	starts  atomic.Int32

	mu    sync.Mutex
	cmd   *exec.Cmd
	ready bool
	last  []string // the latest lines of output
}

func newSlot(t *testing.T, w *world, i int) *slot {
	s := &slot{t: t, i: i, logDir: t.TempDir()}
	urls := make([]string, 0, len(w.cluster.nodes))
	for _, n := range w.cluster.nodes {
		p := tcpproxy.Start(t, n.clientAddr())
		s.proxies = append(s.proxies, p)
		urls = append(urls, "nats://"+p.Addr())
	}
	// Port 0: the engine binds its own. A port chosen here and closed
	// could be taken by another process before the engine binds it.
	yaml := fmt.Sprintf(`nats:
  url: %s
  engine: {lease_seconds: %d, drain_seconds: 1, bucket_replicas: 3, hot_standby: true}
data_dir: %s
http: {listen: "127.0.0.1:0"}
services:
  keyvalue: {adapter: memory}
  document: {adapter: off}
  object_storage: {adapter: off}
  vector_store: {adapter: off}
  cache: {adapter: off}
  secret: {adapter: env}
`, strings.Join(urls, ","), int(w.set.lease/time.Second), filepath.Join(s.logDir, "data"))
	s.config = filepath.Join(s.logDir, "engine.yaml")
	if err := os.WriteFile(s.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// supervise keeps an engine running in the slot until stop closes.
func (s *slot) supervise(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		s.runOnce()
		select {
		case <-stop:
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (s *slot) runOnce() {
	cmd := exec.Command(engineBin, "--config", s.config)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return
	}
	n := s.starts.Add(1)
	logf, err := os.Create(filepath.Join(s.logDir, fmt.Sprintf("engine-%d.log", n)))
	if err != nil {
		return
	}
	defer func() { _ = logf.Close() }()
	s.mu.Lock()
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return
	}
	s.cmd, s.ready = cmd, false
	s.mu.Unlock()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		_, _ = fmt.Fprintln(logf, line)
		s.mu.Lock()
		if strings.Contains(line, "engine started") {
			s.ready = true
		}
		s.last = append(s.last, fmt.Sprintf("engine %d pid %d: %s", s.i, cmd.Process.Pid, line))
		if len(s.last) > 20 {
			s.last = s.last[len(s.last)-20:]
		}
		s.mu.Unlock()
	}
	_ = cmd.Wait()
	s.mu.Lock()
	s.cmd, s.ready = nil, false
	s.mu.Unlock()
}

func (s *slot) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *slot) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

func (s *slot) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.last, "\n") + "\n"
}

// stop ends the slot's process by its PID: SIGCONT in case a fault left it
// stopped, SIGTERM, and SIGKILL if it has not exited in 15 s.
func (s *slot) stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	pid := cmd.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGCONT)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if s.pid() != pid {
			return
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// cluster restarts nodes of the cluster natstest started, on the same
// ports and store directories.
type cluster struct {
	t     *testing.T
	mu    sync.Mutex
	nodes []*node
}

type node struct {
	name        string
	clusterName string
	client      int
	route       int
	store       string
	s           *server.Server
}

func (n *node) clientAddr() string { return fmt.Sprintf("127.0.0.1:%d", n.client) }

func newCluster(t *testing.T, servers []*server.Server) *cluster {
	c := &cluster{t: t}
	for _, s := range servers {
		store := s.StoreDir()
		if filepath.Base(store) == "jetstream" {
			store = filepath.Dir(store) // the server adds it again
		}
		c.nodes = append(c.nodes, &node{
			name: s.Name(), clusterName: s.ClusterName(), store: store, s: s,
			client: s.Addr().(*net.TCPAddr).Port, route: s.ClusterAddr().Port,
		})
	}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, n := range c.nodes {
			n.s.Shutdown()
		}
	})
	return c
}

func (c *cluster) urls() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = "nats://" + n.clientAddr()
	}
	return strings.Join(urls, ",")
}

// restart shuts the nodes down, then starts them again, and waits for the
// cluster's JetStream to be current.
func (c *cluster) restart(idx ...int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	routes := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", n.route)
	}
	for _, i := range idx {
		c.nodes[i].s.Shutdown()
		c.nodes[i].s.WaitForShutdown()
	}
	for _, i := range idx {
		n := c.nodes[i]
		s, err := server.NewServer(&server.Options{
			ServerName: n.name, Host: "127.0.0.1", Port: n.client, JetStream: true, StoreDir: n.store,
			NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: n.clusterName, Host: "127.0.0.1", Port: n.route},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		})
		if err != nil {
			return fmt.Errorf("restart %s: %w", n.name, err)
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			return fmt.Errorf("restart %s: not ready in 10s", n.name)
		}
		n.s = s
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		current, leader := true, false
		for _, n := range c.nodes {
			current = current && n.s.JetStreamIsCurrent()
			leader = leader || n.s.JetStreamIsLeader() && len(n.s.JetStreamClusterPeers()) == len(c.nodes)
		}
		if current && leader {
			return nil
		}
	}
	return fmt.Errorf("the cluster's JetStream is not current 30s after the restart")
}

// The rules flag what they should and nothing else, on events and answers
// made up here in the order the observer would see them.
func TestTheObserverJudgesAnswersByTheEventsSeenBefore(t *testing.T) {
	const a, b = "aaaa", "bbbb"
	cases := []struct {
		name            string
		steps           []string // "event <id> <state>", "send", "answer <id>"
		overlaps, stale int
	}{
		{"ServingAlone", []string{"event a serving", "send", "answer a"}, 0, 0},
		{"AcceptedBeforeTheHandover", []string{"event a serving", "send", "event a released", "event b serving", "answer a"}, 0, 0},
		{"AnsweredAfterAnotherServes", []string{"event a serving", "event b serving", "send", "answer a"}, 1, 0},
		{"AnsweredAfterAnotherServedAndStopped", []string{"event a serving", "event b serving", "send", "event b fenced", "answer a"}, 1, 0},
		{"ServingAgainAfterAnotherServed", []string{"event a serving", "event b serving", "event b released", "event a serving", "send", "answer a"}, 0, 0},
		{"TheNewHolderAnswers", []string{"event a serving", "event b serving", "send", "answer b"}, 0, 0},
		{"AnsweredAfterItsFence", []string{"event a serving", "event a fenced", "send", "answer a"}, 0, 1},
		{"ServingAgainAfterAFence", []string{"event a serving", "event a fenced", "send", "event a serving", "answer a"}, 0, 0},
		{"AnsweredAfterItsRelease", []string{"event a serving", "event a released", "send", "answer a"}, 0, 1},
		{"NeverSeenServing", []string{"send", "answer a"}, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := &world{stats: make([]stats, 1)}
			o := &observer{w: w, pending: map[uint64]*attempt{}, views: map[string]*view{}, answered: map[string]time.Time{}}
			ids := map[string]string{"a": a, "b": b}
			now := time.Now()
			for _, step := range c.steps {
				now = now.Add(time.Millisecond)
				f := strings.Fields(step)
				switch f[0] {
				case "event":
					data, _ := json.Marshal(wire.EngineEvent{InstanceID: ids[f[1]], To: f[2]})
					o.receive(&nats.Msg{Subject: wire.EventsSubject, Data: data}, now)
				case "send":
					o.pending[1] = &attempt{sent: now, done: make(chan answer, 1)}
				case "answer":
					data, _ := json.Marshal(wire.EngineInfoReply{InstanceID: ids[f[1]]})
					o.receive(&nats.Msg{Subject: replyPrefix + "1", Data: data, Header: nats.Header{}}, now)
				}
			}
			if st := w.stats[0]; st.overlaps != c.overlaps || st.stale != c.stale {
				t.Fatalf("overlaps %d, stale %d; want %d, %d (%v)", st.overlaps, st.stale, c.overlaps, c.stale, o.found)
			}
		})
	}
}
