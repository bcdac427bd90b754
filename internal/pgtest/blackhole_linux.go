package pgtest

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Blackhole returns an address that forwards to target across a network
// the test can cut, and the cut: from then on every packet either way is
// dropped, with no reset and no error, as when a link or a host goes
// dark. The two ends are a pair of virtual Ethernet links, the address
// on the far one in a network namespace of the test's own: the kernel of
// neither side answers for the other, so bytes sent go unacknowledged and
// keepalive probes unanswered. Making them needs root and the ip command;
// the test is skipped without them. Everything is removed when the test
// ends.
func Blackhole(t testing.TB, target string) (addr string, cut func()) {
	t.Helper()
	ipCmd, err := exec.LookPath("ip")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("pgtest: a blackhole needs root and the ip command")
	}
	n := rand.IntN(1 << 16)
	ns := fmt.Sprintf("abi-bh-%d", n)
	near, far := fmt.Sprintf("abibh%dn", n), fmt.Sprintf("abibh%df", n)
	nearIP := fmt.Sprintf("10.214.%d.%d", n>>8, n&0xfc|1)
	farIP := fmt.Sprintf("10.214.%d.%d", n>>8, n&0xfc|2)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ipCmd, args...).CombinedOutput(); err != nil {
			t.Skipf("pgtest: a blackhole: ip %v: %v: %s", args, err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command(ipCmd, "netns", "delete", ns).Run() })
	ip("link", "add", near, "type", "veth", "peer", "name", far)
	t.Cleanup(func() { _ = exec.Command(ipCmd, "link", "delete", near).Run() })
	ip("link", "set", far, "netns", ns)
	ip("addr", "add", nearIP+"/30", "dev", near)
	ip("link", "set", near, "up")
	ip("-n", ns, "addr", "add", farIP+"/30", "dev", far)
	ip("-n", ns, "link", "set", far, "up")

	ln, err := listenIn(ns, net.JoinHostPort(farIP, "0"))
	if err != nil {
		t.Fatalf("pgtest: listen in %s: %v", ns, err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, server)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(server, client); _ = server.Close() })
			wg.Go(func() { _, _ = io.Copy(client, server); _ = client.Close() })
		}
	})
	return ln.Addr().String(), func() {
		t.Helper()
		if out, err := exec.Command(ipCmd, "link", "set", near, "down").CombinedOutput(); err != nil {
			t.Fatalf("pgtest: cut the blackhole: %v: %s", err, out)
		}
	}
}

// listenIn listens on addr in the network namespace ns. The socket is made
// on a thread moved into ns, and stays there; the thread, never handed
// back, ends with its goroutine.
func listenIn(ns, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- result{err: err}
			return
		}
		ln, err := net.Listen("tcp", addr)
		done <- result{ln, err}
	}()
	r := <-done
	return r.ln, r.err
}
