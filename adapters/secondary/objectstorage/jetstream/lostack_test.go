package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// losesReplies dials a connection that, from the moment it sends an
// object's description, loses every reply the server sends it but a
// refusal on the revision (10071); when the connection then asks for a
// key's last message, the call is given up (cancel). A network that drops
// replies, and a caller whose time runs out while it asks.
type losesReplies struct {
	meta   string
	cancel context.CancelFunc

	mu      sync.Mutex
	losing  bool
	refused bool
}

func (p *losesReplies) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return lossyConn{Conn: c, p: p}, nil
}

// stop delivers every reply again.
func (p *losesReplies) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.losing = false
}

type lossyConn struct {
	net.Conn
	p *losesReplies
}

func (c lossyConn) Write(b []byte) (int, error) {
	s := string(b)
	c.p.mu.Lock()
	if strings.Contains(s, c.p.meta) {
		c.p.losing = true
	}
	if c.p.refused && strings.Contains(s, "PUB $JS.API.STREAM.MSG.GET.") {
		c.p.cancel()
	}
	c.p.mu.Unlock()
	return c.Conn.Write(b)
}

func (c lossyConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		c.p.mu.Lock()
		lose := c.p.losing && n > 0
		if lose && strings.Contains(string(b[:n]), `"err_code":10071`) {
			c.p.refused, lose = true, false
		}
		c.p.mu.Unlock()
		if !lose || err != nil {
			return n, err
		}
	}
}

// A Put whose description was stored with its acknowledgement lost sends
// it again; a single-replica stream refuses the resend on the revision,
// the description's own. Whether the first was stored is then unknown when
// the caller gives up while the Put asks: the Put keeps its chunks, and
// the object its description may have made visible can be read. Before,
// the unknown outcome carried the stream's refusal, the Put took it for
// one that stored nothing and purged its chunks, and the object it had
// made visible could not be read.
func TestAPutWhoseDescriptionMayHaveBeenStoredKeepsItsChunks(t *testing.T) {
	const bucket = "LOSTACK"
	url := natstest.StartServer(t).ClientURL()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	call, cancelCall := context.WithCancel(ctx)
	t.Cleanup(cancelCall)
	p := &losesReplies{meta: "PUB $O." + bucket + ".M.", cancel: cancelCall}
	lossy, err := jetstream.Open(ctx, jetstream.Config{Bucket: bucket}, natstest.Connect(t, url, nats.SetCustomDialer(p)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lossy.Close() })
	other := open(t, url, jetstream.Config{Bucket: bucket})

	_, err = lossy.Put(call, "o", strings.NewReader("ours"), ports.PutObjectOptions{})
	t.Logf("Put whose description's acknowledgement was lost: %v", err)
	if errors.Is(err, ports.ErrNotDone) || errors.Is(err, ports.ErrConflict) || errors.Is(err, ports.ErrFenced) {
		t.Fatalf("Put of unknown outcome: %v, which tells the caller nothing was written", err)
	}
	p.stop()
	r, _, err := other.Get(ctx, "o", ports.GetObjectOptions{})
	if err != nil {
		t.Fatalf("Get of the object the Put's description made visible: %v", err)
	}
	got, err := io.ReadAll(r)
	_ = r.Close()
	if err != nil || !bytes.Equal(got, []byte("ours")) {
		t.Fatalf("the object the Put's description made visible reads %q, %v; want %q: its chunks are gone", got, err, "ours")
	}
}
