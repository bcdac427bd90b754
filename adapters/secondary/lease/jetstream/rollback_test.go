package jetstream_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
)

// A broker whose lease stream comes back behind a revision it had
// acknowledged (a store restored from a backup, or a node that lost writes
// within its fsync interval) must not hand out a term again. An engine
// that saw the newer revision reads the older record as a key with no
// value, and its create goes on above every revision it saw.
func TestAStreamThatWentBackHandsOutNoTermAgain(t *testing.T) {
	dir, backup := t.TempDir(), t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true}
	s := natstest.StartWith(t, opts)
	opts.Port = s.Addr().(*net.TCPAddr).Port // restarts listen where the clients reconnect
	restart := func(restore bool) {
		t.Helper()
		s.Shutdown()
		s.WaitForShutdown()
		if restore {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(dir, os.DirFS(backup)); err != nil {
				t.Fatal(err)
			}
		} else if err := os.CopyFS(backup, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		s = natstest.StartWith(t, opts)
	}
	url := s.ClientURL()
	open := func() *jetstream.Lease {
		t.Helper()
		nc := natstest.Connect(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
		l, err := jetstream.Open(t.Context(), nc, jetstream.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// retry runs a call until the reconnected client gets an answer.
	retry := func(what string, call func(context.Context) error) {
		t.Helper()
		var err error
		for deadline := time.Now().Add(eventWait); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			err = call(ctx)
			cancel()
			if err == nil {
				return
			}
		}
		t.Fatalf("%s: %v", what, err)
	}

	first, second, standby := open(), open(), open()
	r1, err := first.Create(t.Context(), domain.ThisProcess("test", "v1"))
	if err != nil {
		t.Fatal(err)
	}
	restart(false) // the backup holds the first holder's record

	var r2 uint64
	retry("take over", func(ctx context.Context) (err error) {
		r2, err = second.Update(ctx, domain.ThisProcess("test", "v2"), r1)
		return err
	})
	retry("the standby sees the takeover", func(ctx context.Context) error {
		rec, err := standby.Read(ctx)
		if err == nil && rec.Revision != r2 {
			t.Fatalf("the standby read revision %d, want %d", rec.Revision, r2)
		}
		return err
	})

	restart(true) // the stream goes back to the first holder's record
	var rec domain.Record
	retry("read after the restore", func(ctx context.Context) (err error) {
		rec, err = standby.Read(ctx)
		return err
	})
	if rec.Present {
		t.Fatalf("the standby read the record at %d, behind the %d it saw, as the key's", rec.Revision, r2)
	}
	var term uint64
	retry("take the key", func(ctx context.Context) (err error) {
		term, err = standby.Create(ctx, domain.ThisProcess("test", "v2"))
		return err
	})
	if term <= r2 {
		t.Fatalf("the standby took the lease at revision %d, not above the %d the second holder had: a term handed out again", term, r2)
	}
}
