package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/abi-engine/engine/internal/enginetest"
)

// lab holds what a run starts: a scratch directory, the engine binary,
// brokers and processes, so that stop ends every one of them.
type lab struct {
	dir    string
	engine string

	mu      sync.Mutex
	procs   []*proc
	brokers []*server.Server
}

func newLab() (*lab, error) {
	dir, err := os.MkdirTemp("", "enginebench")
	if err != nil {
		return nil, err
	}
	return &lab{dir: dir}, nil
}

// buildEngine builds the engine command once, as a deploy would run it.
func (l *lab) buildEngine(ctx context.Context) error {
	bin, err := enginetest.Build(ctx, l.dir)
	l.engine = bin
	return err
}

// mkdir makes a fresh directory under the lab's.
func (l *lab) mkdir(name string) (string, error) {
	dir, err := os.MkdirTemp(l.dir, name)
	return dir, err
}

// broker runs a JetStream nats-server on a free loopback port.
func (l *lab) broker() (*server.Server, error) {
	dir, err := l.mkdir("nats")
	if err != nil {
		return nil, err
	}
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("nats-server not ready in 10s")
	}
	l.mu.Lock()
	l.brokers = append(l.brokers, s)
	l.mu.Unlock()
	return s, nil
}

// start runs a process in dir and keeps its standard error for waitLog.
func (l *lab) start(dir string, env []string, name string, args ...string) (*proc, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, lines: make(chan string, 4096), done: make(chan struct{})}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.started = started
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	var readers sync.WaitGroup
	for _, r := range []interface{ Read([]byte) (int, error) }{stderr, stdout} {
		readers.Go(func() {
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				p.mu.Lock()
				p.log.WriteString(sc.Text() + "\n")
				p.mu.Unlock()
				select {
				case p.lines <- sc.Text():
				default:
				}
			}
		})
	}
	go func() {
		readers.Wait()
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop ends every process the lab started (SIGTERM, then SIGKILL after a
// grace period) and every broker, and removes the scratch directory.
func (l *lab) stop() {
	l.mu.Lock()
	procs, brokers := l.procs, l.brokers
	l.mu.Unlock()
	for _, p := range procs {
		p.stop(10 * time.Second)
	}
	for _, s := range brokers {
		s.Shutdown()
		s.WaitForShutdown()
	}
	_ = os.RemoveAll(l.dir)
}

// proc is one child process.
type proc struct {
	cmd     *exec.Cmd
	started time.Time
	mu      sync.Mutex
	log     bytes.Buffer
	lines   chan string
	done    chan struct{}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// explain adds to err, from a scenario that failed while p ran, whether p
// had exited and the end of its log: an engine that stopped answering
// says why there.
func (p *proc) explain(err error) error {
	state := "still running"
	if p.exited() {
		state = "exited: " + p.cmd.ProcessState.String()
	}
	log := p.output()
	const tail = 4 << 10
	if len(log) > tail {
		log = "..." + log[len(log)-tail:]
	}
	return fmt.Errorf("%w\nengine pid %d, %s; its log:\n%s", err, p.pid(), state, log)
}

// waitLog waits for an output line containing s and returns when it was read.
func (p *proc) waitLog(ctx context.Context, s string, timeout time.Duration) (time.Time, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case l := <-p.lines:
			if strings.Contains(l, s) {
				return time.Now(), nil
			}
		case <-p.done:
			if strings.Contains(p.output(), s) {
				return time.Now(), nil
			}
			return time.Time{}, fmt.Errorf("pid %d exited before printing %q:\n%s", p.pid(), s, p.output())
		case <-deadline.C:
			return time.Time{}, fmt.Errorf("pid %d did not print %q in %v:\n%s", p.pid(), s, timeout, p.output())
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process unless it has exited.
func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	return p.cmd.Process.Signal(sig)
}

// wait waits for the process to end.
func (p *proc) wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("pid %d did not exit in %v", p.pid(), timeout)
	}
}

// stop asks the process to stop, and kills it if it has not within grace.
func (p *proc) stop(grace time.Duration) {
	_ = p.signal(syscall.SIGTERM)
	if p.wait(grace) != nil {
		_ = p.signal(syscall.SIGKILL)
		_ = p.wait(grace)
	}
}

// rssMB reads the resident set size of a running process.
func rssMB(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", rest, err)
			}
			return round(kb / 1024), nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// listening reports whether something accepts connections at addr.
func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
