package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// Callers is how many goroutines call at once in the throughput scenarios.
const callers = 64

// failoverLease is the lease of the failover scenario.
const failoverLease = 2 * time.Second

// startTimeout bounds every wait for an engine to reach a state.
const startTimeout = 30 * time.Second

// bench is one run: the lab, the duration of each load, what was measured
// and what the reader should know about how.
type bench struct {
	lab      *lab
	duration time.Duration
	// lease is the lease_seconds of the engines a load or a measure of
	// boot or vectors runs on, long enough that a busy machine does not
	// fence them.
	lease  int
	result Result
	notes  []string
}

// defaultLease is the lease of the engines the loads run on, in seconds.
const defaultLease = 20

func (b *bench) note(format string, args ...any) {
	b.notes = append(b.notes, fmt.Sprintf(format, args...))
}

// engineConfig is the engine.yaml a scenario writes.
type engineConfig struct {
	url   string
	lease int
	hot   bool
	// dsn puts keyvalue on PostgreSQL, in table; empty keeps it in memory,
	// or on SQLite when sqlite is set.
	dsn, table string
	// sqlite puts keyvalue and document on SQLite and objects in files,
	// the embedded defaults.
	sqlite bool
	// vectors is the vector_store block; empty turns the service off.
	vectors string
}

func (b *bench) writeConfig(c engineConfig) (string, error) {
	dir, err := b.lab.mkdir("engine")
	if err != nil {
		return "", err
	}
	vectors := "{adapter: off}"
	if c.vectors != "" {
		vectors = c.vectors
	}
	kv, doc, obj := "{adapter: memory}", "{adapter: off}", "{adapter: off}"
	switch {
	case c.dsn != "":
		kv = fmt.Sprintf("{adapter: postgres, config: {dsn: %q, table: %s}}", c.dsn, c.table)
	case c.sqlite:
		kv, doc, obj = "{adapter: sqlite}", "{adapter: sqlite}", "{adapter: localfs}"
	}
	yaml := fmt.Sprintf(`nats:
  url: %s
  engine: {lease_seconds: %d, drain_seconds: 5, hot_standby: %t}
data_dir: %s
http: {listen: "127.0.0.1:0"}
services:
  keyvalue: %s
  document: %s
  object_storage: %s
  vector_store: %s
  cache: {adapter: off}
  secret: {adapter: env}
`, c.url, c.lease, c.hot, filepath.Join(dir, "data"), kv, doc, obj, vectors)
	path := filepath.Join(dir, "engine.yaml")
	return path, os.WriteFile(path, []byte(yaml), 0o600)
}

// engine starts an engine process on config and waits for its start line
// to say state.
func (b *bench) engine(ctx context.Context, config, state string, env ...string) (*proc, error) {
	p, err := b.lab.start(filepath.Dir(config), env, b.lab.engine, "--config", config)
	if err != nil {
		return nil, err
	}
	if _, err := p.waitLog(ctx, "state="+state, startTimeout); err != nil {
		return nil, err
	}
	return p, nil
}

// load is the traffic of the handover: callers writing then reading their
// own keys through the keyvalue facade, and a prober asking without pause
// which engine answers.
type load struct {
	stop   chan struct{}
	wg     sync.WaitGroup
	calls  atomic.Int64
	failed atomic.Int64
	maxLat atomic.Int64

	mu       sync.Mutex
	firstErr error
	answered map[string]time.Time // instance id -> first answer
}

func startLoad(url string, shared bool) (*load, error) {
	l := &load{stop: make(chan struct{}), answered: map[string]time.Time{}}
	conns := make([]*nats.Conn, 0, 2)
	for range 2 {
		nc, err := nats.Connect(url)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, err
		}
		conns = append(conns, nc)
	}
	kv := natsclient.NewKeyValue(natsclient.New(conns[0]))
	for i := range callers {
		l.wg.Go(func() {
			for n := 0; l.running(); n++ {
				key, val := fmt.Sprintf("handover/%d/%d", i, n%50), []byte(fmt.Sprint(n))
				l.call(func(ctx context.Context) error { return kv.Set(ctx, key, val, 0) })
				l.call(func(ctx context.Context) error {
					got, err := kv.Get(ctx, key)
					switch {
					case errors.Is(err, ports.ErrNotFound) && !shared:
						// Each engine has a store of its own without a shared
						// backend: a read just after the handover may miss.
						return nil
					case err == nil && string(got) != string(val):
						return fmt.Errorf("read %q after writing %q", got, val)
					}
					return err
				})
			}
		})
	}
	prober := natsclient.New(conns[1])
	l.wg.Go(func() {
		for l.running() {
			var info wire.EngineInfoReply
			l.call(func(ctx context.Context) error {
				err := prober.Call(ctx, wire.Subject(wire.ServiceEngine, wire.EngineInfo), wire.Empty{}, &info)
				if err == nil {
					l.mu.Lock()
					if _, ok := l.answered[info.InstanceID]; !ok {
						l.answered[info.InstanceID] = time.Now()
					}
					l.mu.Unlock()
				}
				return err
			})
		}
	})
	go func() {
		l.wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	}()
	return l, nil
}

func (l *load) running() bool {
	select {
	case <-l.stop:
		return false
	default:
		return true
	}
}

func (l *load) call(f func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t := time.Now()
	err := f(ctx)
	lat := time.Since(t)
	cancel()
	l.calls.Add(1)
	for {
		cur := l.maxLat.Load()
		if int64(lat) <= cur || l.maxLat.CompareAndSwap(cur, int64(lat)) {
			break
		}
	}
	if err != nil {
		l.failed.Add(1)
		l.mu.Lock()
		l.firstErr = cmp(l.firstErr, err)
		l.mu.Unlock()
	}
}

func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
}

// handover deploys a new engine under load: v1 serves, v2 stands by, v1
// gets SIGTERM half way, releases the lease and drains while v2 serves.
func (b *bench) handover(ctx context.Context) error {
	s, err := b.lab.broker()
	if err != nil {
		return err
	}
	url := s.ClientURL()
	c := engineConfig{url: url, lease: 2}
	var oldEnv, nextEnv []string
	if dsn := os.Getenv("ENGINE_TEST_PG_DSN"); dsn != "" {
		c.dsn, c.table = dsn, fmt.Sprintf("enginebench_%d", time.Now().UnixNano())
		defer dropTable(dsn, c.table)
		oldEnv, nextEnv = []string{"ABI_ROLLOUT_ID=v1"}, []string{"ABI_ROLLOUT_ID=v2"}
		b.note("handover: rollout v1 then v2, keyvalue on PostgreSQL (ENGINE_TEST_PG_DSN)")
	} else {
		c.hot = true
		b.note("handover: ENGINE_TEST_PG_DSN is not set, and a rollout needs shared backends; " +
			"ran two engines without rollout ids, the second a hot standby, keyvalue in memory in each")
	}
	// A configuration each: the engines listen for HTTP on ports of their own.
	oldConfig, err := b.writeConfig(c)
	if err != nil {
		return err
	}
	nextConfig, err := b.writeConfig(c)
	if err != nil {
		return err
	}
	old, err := b.engine(ctx, oldConfig, "serving", oldEnv...)
	if err != nil {
		return err
	}
	next, err := b.engine(ctx, nextConfig, "standby", nextEnv...)
	if err != nil {
		return err
	}
	oldID, err := whoServes(ctx, url)
	if err != nil {
		return err
	}
	released, stopEvents, err := watchRelease(url, oldID)
	if err != nil {
		return err
	}
	defer stopEvents()

	l, err := startLoad(url, c.dsn != "")
	if err != nil {
		return err
	}
	start := time.Now()
	ended := false
	defer func() {
		if !ended {
			l.end()
		}
	}()
	if !sleep(ctx, b.duration/2) {
		return ctx.Err()
	}
	if err := old.signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := old.wait(startTimeout); err != nil {
		return err
	}
	var nextFirst time.Time
	for deadline := time.Now().Add(startTimeout); ; {
		if t, ok := l.firstAnswerOther(oldID); ok {
			nextFirst = t
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("handover: the new engine never answered; its output:\n%s", next.output())
		}
		if !sleep(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
	rest := max(time.Until(start.Add(b.duration)), b.duration/2-time.Since(nextFirst))
	if !sleep(ctx, rest) {
		return ctx.Err()
	}
	l.end()
	ended = true
	next.stop(startTimeout)

	relAt, ok := released()
	if !ok {
		return fmt.Errorf("handover: no release of %s seen on %s", oldID, wire.EventsSubject)
	}
	r := &b.result
	r.HandoverCalls, r.HandoverFailed = ptr(l.calls.Load()), ptr(l.failed.Load())
	r.HandoverMaxMS = ptr(millis(time.Duration(l.maxLat.Load())))
	r.HandoverGapMS = ptr(millis(nextFirst.Sub(relAt)))
	if l.firstErr != nil {
		b.note("handover: first failed call: %v", l.firstErr)
	}
	return nil
}

// firstAnswerOther is the first answer from an instance other than id.
func (l *load) firstAnswerOther(id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for other, t := range l.answered {
		if other != id {
			return t, true
		}
	}
	return time.Time{}, false
}

// whoServes asks abi.svc.engine.v1.info which instance answers.
func whoServes(ctx context.Context, url string) (string, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	var info wire.EngineInfoReply
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := natsclient.New(nc).Call(cctx, wire.Subject(wire.ServiceEngine, wire.EngineInfo), wire.Empty{}, &info); err != nil {
		return "", err
	}
	return info.InstanceID, nil
}

// watchRelease records when the event of id's release arrives.
func watchRelease(url, id string) (func() (time.Time, bool), func(), error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	var at time.Time
	_, err = nc.Subscribe(wire.EventsSubject, func(m *nats.Msg) {
		now := time.Now()
		var ev wire.EngineEvent
		if json.Unmarshal(m.Data, &ev) != nil || ev.InstanceID != id || ev.To != "released" {
			return
		}
		mu.Lock()
		if at.IsZero() {
			at = now
		}
		mu.Unlock()
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return func() (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		return at, !at.IsZero()
	}, nc.Close, nil
}

// dropTable removes the handover's table; the bench leaves nothing behind.
func dropTable(dsn, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	_, _ = conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize())
}

// failover kills the serving engine while a hot standby waits, then calls
// every 10 ms, one plain request at a time, until an engine answers: the
// engine's failover, without a client's retry pauses added.
func (b *bench) failover(ctx context.Context) error {
	s, err := b.lab.broker()
	if err != nil {
		return err
	}
	url := s.ClientURL()
	c := engineConfig{url: url, lease: int(failoverLease / time.Second), hot: true}
	servingConfig, err := b.writeConfig(c)
	if err != nil {
		return err
	}
	standbyConfig, err := b.writeConfig(c)
	if err != nil {
		return err
	}
	serving, err := b.engine(ctx, servingConfig, "serving")
	if err != nil {
		return err
	}
	standby, err := b.engine(ctx, standbyConfig, "standby")
	if err != nil {
		return err
	}
	deadID, err := whoServes(ctx, url)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := serving.signal(syscall.SIGKILL); err != nil {
		return err
	}
	killed := time.Now()
	subject := wire.Subject(wire.ServiceEngine, wire.EngineInfo)
	for time.Since(killed) < 10*failoverLease {
		if err := ctx.Err(); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		reply, err := nc.RequestWithContext(cctx, subject, []byte("{}"))
		cancel()
		if err == nil && reply.Header.Get(wire.ErrorCodeHeader) == "" {
			var info wire.EngineInfoReply
			if json.Unmarshal(reply.Data, &info) == nil && info.InstanceID != deadID {
				b.result.FailoverMS = ptr(millis(time.Since(killed)))
				standby.stop(startTimeout)
				return nil
			}
		}
		sleep(ctx, 10*time.Millisecond)
	}
	return fmt.Errorf("failover: no engine answered within %v of the kill; the standby's output:\n%s", 10*failoverLease, standby.output())
}

// Where an engine started with no configuration runs its broker and its
// HTTP API.
const (
	defaultNATS = "127.0.0.1:4222"
	defaultHTTP = "127.0.0.1:8080"
)

// boot starts an engine on embedded defaults (no flags, in an empty
// directory) and times it to /readyz 200, or to its start line when no
// HTTP API answers; then reads its resident memory once idle.
func (b *bench) boot(ctx context.Context) error {
	dir, err := b.lab.mkdir("boot")
	if err != nil {
		return err
	}
	var args []string
	readyz := defaultHTTP
	if listening(defaultNATS) || listening(readyz) {
		// Something else holds the default ports: an engine on embedded
		// defaults would join that broker. Use a broker of the bench's own.
		s, err := b.lab.broker()
		if err != nil {
			return err
		}
		config, err := b.writeConfig(engineConfig{url: s.ClientURL(), lease: b.lease})
		if err != nil {
			return err
		}
		readyz = "" // the engine picks its port; waitReady reads it from the log
		args = []string{"--config", config}
		dir = filepath.Dir(config)
		b.note("boot: 127.0.0.1:4222 or :8080 was in use, so the engine ran on a configuration and a broker of the bench's own instead of embedded defaults")
	}
	p, err := b.lab.start(dir, nil, b.lab.engine, args...)
	if err != nil {
		return err
	}
	ready, how, err := waitReady(ctx, p, readyz)
	if err != nil {
		return err
	}
	b.result.BootMS = ptr(millis(ready.Sub(p.started)))
	if how != "" {
		b.note("boot: %s", how)
	}
	if !sleep(ctx, time.Second) {
		return ctx.Err()
	}
	rss, err := rssMB(p.pid())
	if err != nil {
		return err
	}
	b.result.RSSMB = ptr(rss)
	// The first start on new data holds the new lease key for a lease
	// (ADR 0002); every start after it finds the released record of the
	// one before. Stopping releases the lease, so the same start again is
	// that common case.
	p.stop(startTimeout)
	again, err := b.lab.start(dir, nil, b.lab.engine, args...)
	if err != nil {
		return err
	}
	defer again.stop(startTimeout)
	ready, _, err = waitReady(ctx, again, readyz)
	if err != nil {
		return fmt.Errorf("boot: the start again: %w", err)
	}
	b.result.BootRestartMS = ptr(millis(ready.Sub(again.started)))
	return nil
}

// listenLine is how the engine logs the address of its HTTP API.
var listenLine = regexp.MustCompile(`msg="HTTP API listening" addr=(\S+)`)

// listenAddr is the address the engine's log says its HTTP API listens
// on, "" until it says so.
func listenAddr(log string) string {
	if m := listenLine.FindStringSubmatch(log); m != nil {
		return m[1]
	}
	return ""
}

// waitReady polls /readyz every 5 ms, at addr, or where the engine's log
// says its HTTP API listens when addr is "" (a configuration of port 0,
// which the engine binds itself: a port chosen here and bound there could
// be taken between the two). When the engine has logged its start and
// nothing listens on the HTTP address a second later, this build has no
// HTTP API: the start line's time is the boot time, and how says so.
func waitReady(ctx context.Context, p *proc, addr string) (ready time.Time, how string, err error) {
	client := &http.Client{Timeout: time.Second}
	started := make(chan time.Time, 1)
	go func() {
		if t, err := p.waitLog(ctx, "engine started", startTimeout); err == nil {
			started <- t
		}
	}()
	var logged time.Time
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		at := addr
		if at == "" {
			at = listenAddr(p.output())
		}
		resp, err := client.Get("http://" + at + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), "", nil
			}
		}
		select {
		case logged = <-started:
		default:
		}
		if !logged.IsZero() && err != nil && time.Since(logged) > time.Second {
			return logged, "no HTTP API answered /readyz, so boot_ms runs to the \"engine started\" log line", nil
		}
		if p.exited() {
			return time.Time{}, "", fmt.Errorf("boot: the engine exited:\n%s", p.output())
		}
		if !sleep(ctx, 5*time.Millisecond) {
			return time.Time{}, "", ctx.Err()
		}
	}
	return time.Time{}, "", fmt.Errorf("boot: not ready in %v:\n%s", startTimeout, p.output())
}

// sleep waits d unless ctx ends first; it reports whether it slept.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
