package s3_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	objects3 "github.com/abi-engine/engine/adapters/secondary/objectstorage/s3"
	"github.com/abi-engine/engine/ports"
)

// keepAlive stands between a store and the S3 server as an HTTP proxy that
// keeps its clients' connections open between requests, whatever the
// server does with its own (versitygw closes each after one answer), and
// counts them.
type keepAlive struct {
	mu      sync.Mutex
	open    int           // connections from the store not yet closed
	changed chan struct{} // receives when open changes
}

// startKeepAlive returns the endpoint to give the store instead of the
// server's.
func startKeepAlive(t *testing.T, endpoint string) (string, *keepAlive) {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	k := &keepAlive{changed: make(chan struct{}, 1)}
	// The request keeps the Host the store signed.
	srv := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		k.mu.Lock()
		switch state {
		case http.StateNew:
			k.open++
		case http.StateClosed, http.StateHijacked:
			k.open--
		}
		k.mu.Unlock()
		select {
		case k.changed <- struct{}{}:
		default:
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, k
}

func (k *keepAlive) connections() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.open
}

// Close releases the store's idle connections: an engine that stops, or
// closes the stores of a start that failed, must not hold sockets to the
// service until they idle out (90 s) or the process ends. A proxy between
// the store and the server counts the store's connections.
func TestClosingAStoreReleasesItsConnections(t *testing.T) {
	c := server(t)
	c.Bucket = newBucket(t, c)
	endpoint, proxy := startKeepAlive(t, c.Endpoint)
	via := c
	via.Endpoint = endpoint
	s := open(t, via)
	// Calls at once, so the store holds several connections.
	var calls sync.WaitGroup
	for i := range 4 {
		calls.Go(func() {
			if _, err := s.Put(t.Context(), fmt.Sprintf("k%d", i), strings.NewReader("x"), ports.PutObjectOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	calls.Wait()
	if proxy.connections() == 0 {
		t.Fatal("the store holds no connection after its calls; the test cannot tell whether Close releases them")
	}
	held := proxy.connections()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	proxy.awaitNone(t, held)
}

// An Open that fails (here on a bucket that does not exist) releases the
// connection it used: the caller has no store to close.
func TestAnOpenThatFailsReleasesItsConnections(t *testing.T) {
	c := server(t)
	c.Bucket = bucketName(t)
	endpoint, proxy := startKeepAlive(t, c.Endpoint)
	c.Endpoint = endpoint
	if _, err := objects3.Open(t.Context(), c); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Open of a missing bucket: %v, want ErrNotFound", err)
	}
	proxy.awaitNone(t, proxy.connections())
}

// awaitNone waits until the store's connections, held of them when it
// let them go, are closed.
func (k *keepAlive) awaitNone(t *testing.T, held int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for k.connections() > 0 {
		select {
		case <-k.changed:
		case <-deadline:
			t.Fatalf("%d of the store's %d connections are still open 30 s after it let them go", k.connections(), held)
		}
	}
}
