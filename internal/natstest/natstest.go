// Package natstest runs real nats-servers inside a test process: one node,
// or a three-node JetStream cluster on loopback.
package natstest

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// StartServer runs one node with JetStream and stops it when the test ends.
func StartServer(tb testing.TB) *server.Server {
	tb.Helper()
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  tb.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		tb.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		tb.Fatalf("nats-server not ready in 10s")
	}
	tb.Cleanup(s.Shutdown)
	return s
}

// StartCluster runs a three-node JetStream cluster and returns once its meta
// leader sees every peer and every node is current.
func StartCluster(tb testing.TB) []*server.Server {
	tb.Helper()
	ports := freePorts(tb, 3)
	routes := make([]string, len(ports))
	for i, p := range ports {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	servers := make([]*server.Server, len(ports))
	for i, p := range ports {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   tb.TempDir(),
			NoLog:      true,
			NoSigs:     true,
			Cluster: server.ClusterOpts{
				Name: "engine-test",
				Host: "127.0.0.1",
				Port: p,
			},
			Routes: server.RoutesFromStr(strings.Join(routes, ",")),
		}
		s, err := server.NewServer(opts)
		if err != nil {
			tb.Fatalf("nats-server n%d: %v", i+1, err)
		}
		servers[i] = s
		go s.Start()
		tb.Cleanup(s.Shutdown)
	}
	for _, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			tb.Fatalf("nats-server %s not ready in 10s", s.Name())
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if clusterReady(servers) {
			return servers
		}
		if time.Now().After(deadline) {
			tb.Fatalf("nats cluster not ready in 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func clusterReady(servers []*server.Server) bool {
	leaderSeesAll := false
	for _, s := range servers {
		if !s.JetStreamIsCurrent() {
			return false
		}
		if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == len(servers) {
			leaderSeesAll = true
		}
	}
	return leaderSeesAll
}

// URLs is every client URL of the servers, for a connection that fails over.
func URLs(servers ...*server.Server) string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Connect opens a connection that is closed when the test ends.
func Connect(tb testing.TB, url string, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		tb.Fatalf("connect to %s: %v", url, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	ports := make([]int, n)
	listeners := make([]net.Listener, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("free port: %v", err)
		}
		listeners[i] = l
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	for _, l := range listeners {
		_ = l.Close()
	}
	return ports
}
