// Package natstest runs real nats-servers inside a test process: one node,
// or a three-node JetStream cluster on loopback.
package natstest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StartServer runs one node with JetStream and stops it when the test ends.
func StartServer(tb testing.TB) *server.Server {
	tb.Helper()
	return StartWith(tb, &server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  tb.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	})
}

// StartCluster runs a three-node JetStream cluster and returns once its meta
// leader sees every peer and every node is current. The route ports are
// picked free and then bound by the nodes, so another process can take one
// in between; a cluster that does not come up is torn down and tried again
// on new ports, three times at most.
func StartCluster(tb testing.TB) []*server.Server {
	tb.Helper()
	var err error
	for range 3 {
		var servers []*server.Server
		if servers, err = startCluster(tb); err == nil {
			return servers
		}
	}
	tb.Fatalf("nats cluster: %v", err)
	return nil
}

func startCluster(tb testing.TB) ([]*server.Server, error) {
	ports := freePorts(tb, 3)
	routes := make([]string, len(ports))
	for i, p := range ports {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	servers := make([]*server.Server, 0, len(ports))
	fail := func(err error) ([]*server.Server, error) {
		for _, s := range servers {
			s.Shutdown()
		}
		return nil, err
	}
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
			return fail(fmt.Errorf("nats-server n%d: %w", i+1, err))
		}
		servers = append(servers, s)
		go s.Start()
		tb.Cleanup(s.Shutdown)
	}
	for _, s := range servers {
		if !s.ReadyForConnections(20 * time.Second) {
			return fail(fmt.Errorf("nats-server %s not ready in 20s", s.Name()))
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for !clusterReady(servers) {
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("nats cluster not ready in 30s"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A meta leader that sees every peer can still refuse a replicated
	// stream for a while, until each peer has reported its resources; only a
	// stream made and deleted shows the cluster takes work.
	if err := awaitJetStream(URLs(servers...), len(servers)); err != nil {
		return fail(err)
	}
	return servers, nil
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

// MarkedBucket starts a node with two users, "ops" and "engine" (each
// with its name as password), of which "engine" may not update the
// stream of bucket. As "ops" it makes the key-value bucket with the
// broker's markers of expiry, which an engine turns off when it may. It
// returns the node's URL and the bucket's stream as "ops" sees it.
func MarkedBucket(tb testing.TB, bucket string) (string, jetstream.Stream) {
	tb.Helper()
	url := StartWith(tb, &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: tb.TempDir(), NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "ops", Password: "ops"},
			{Username: "engine", Password: "engine", Permissions: &server.Permissions{
				Publish: &server.SubjectPermission{Deny: []string{"$JS.API.STREAM.UPDATE.KV_" + bucket}},
			}},
		},
	}).ClientURL()
	js, err := jetstream.New(Connect(tb, url, nats.UserInfo("ops", "ops")))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1, LimitMarkerTTL: time.Minute}); err != nil {
		tb.Fatalf("bucket %s: %v", bucket, err)
	}
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		tb.Fatalf("bucket %s: %v", bucket, err)
	}
	return url, s
}
