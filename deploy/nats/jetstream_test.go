package nats_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	docjetstream "github.com/abi-engine/engine/adapters/secondary/document/jetstream"
	kvjetstream "github.com/abi-engine/engine/adapters/secondary/keyvalue/jetstream"
	objjetstream "github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// The JetStream adapters, on their default buckets, do every call the
// engine makes of them under the engine user's permissions: a deploy with
// nothing but NATS runs on deploy/nats as shipped. A caller may not open
// them: it has no JetStream.
func TestTheJetStreamAdaptersRunUnderTheEngineUsersPermissions(t *testing.T) {
	d := natstest.StartDeployed(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s as engine_a: %v", what, err)
		}
	}

	kv, err := kvjetstream.Open(ctx, kvjetstream.Config{}, d.Connect(t, "engine_a"))
	must("open the keyvalue bucket", err)
	defer kv.Close()
	must("set", kv.Set(ctx, "k", []byte("v"), 0))
	must("set with a TTL", kv.Set(ctx, "t", []byte("v"), time.Hour))
	_, err = kv.SetIfAbsent(ctx, "a", []byte("v"), 0)
	must("set if absent", err)
	_, err = kv.Get(ctx, "k")
	must("get", err)
	keys, _, err := kv.ListKeys(ctx, "", 0, "")
	must("list keys", err)
	if !slices.Equal(keys, []string{"a", "k", "t"}) {
		t.Fatalf("keys %q", keys)
	}
	_, err = kv.DeleteIfValue(ctx, "k", []byte("v"))
	must("delete if value", err)

	docs, err := docjetstream.Open(ctx, docjetstream.Config{}, d.Connect(t, "engine_a"))
	must("open the document bucket", err)
	defer docs.Close()
	must("ensure a collection", docs.EnsureCollection(ctx, "c"))
	put, err := docs.Put(ctx, "c", "d", map[string]any{"n": 1.0}, ports.IfVersion(0))
	must("put", err)
	found, _, err := docs.Find(ctx, "c", ports.Query{Where: map[string]any{"n": 1.0}})
	must("find", err)
	if len(found) != 1 {
		t.Fatalf("find gave %d documents", len(found))
	}
	_, err = docs.Collections(ctx)
	must("list collections", err)
	must("delete", docs.Delete(ctx, "c", "d", ports.IfVersion(put.Version)))
	must("drop the collection", docs.DropCollection(ctx, "c"))

	objects, err := objjetstream.Open(ctx, objjetstream.Config{}, d.Connect(t, "engine_a"))
	must("open the object bucket", err)
	defer objects.Close()
	info, err := objects.Put(ctx, "o", strings.NewReader(strings.Repeat("x", 300<<10)), ports.PutObjectOptions{})
	must("put an object", err)
	_, err = objects.Put(ctx, "o", strings.NewReader("y"), ports.PutObjectOptions{IfMatch: info.ETag})
	must("put an object if it matches", err)
	r, _, err := objects.Get(ctx, "o", ports.GetObjectOptions{})
	must("get an object", err)
	_, err = io.ReadAll(r)
	must("read an object", err)
	_, _, err = objects.List(ctx, "", 0, "")
	must("list objects", err)
	must("delete an object", objects.Delete(ctx, "o"))

	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if s, err := kvjetstream.Open(short, kvjetstream.Config{}, d.Connect(t, "caller_a")); err == nil {
		s.Close()
		t.Fatal("a caller opened the keyvalue bucket")
	}
}

// The engine user may reach the default buckets only; a deploy that names
// another bucket must add its lines (docs/security.md). One that forgot
// sees what the broker refused in the engine's log, named by subject, as
// it does for the engine's own connections, and the engine refuses to
// start with an error naming it, well before the store's call timeout.
func TestABucketThePermissionsDoNotCoverIsNamedInTheEnginesLog(t *testing.T) {
	d := natstest.StartDeployed(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.yaml")
	src := fmt.Sprintf(`nats:
  url: %q
  credentials: {user: engine_a, password: %q}
  engine: {lease_seconds: 1, drain_seconds: 1, role: serve}
http: {listen: "off"}
data_dir: %q
services:
  keyvalue: {adapter: jetstream, config: {bucket: NOT_PERMITTED}}
`, d.Server.ClientURL(), natstest.Password("engine_a"), filepath.Join(dir, "data"))
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newEngine(t, path)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- r.app.Start(ctx) }()
	var err error
	select {
	case err = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the engine still starts 20 s after the broker refused its bucket: the refusal is retried as if it were a timeout")
	}
	if err == nil {
		r.app.RequireStop()
		t.Fatal("the engine started on a bucket its user may not reach")
	}
	if !strings.Contains(err.Error(), "$JS.API.STREAM.INFO.KV_NOT_PERMITTED") || !strings.Contains(err.Error(), "permissions") {
		t.Fatalf("the engine refused to start with %q, which names neither the subject refused nor the permission", err)
	}
	// The store fails as soon as the broker's refusal reaches its
	// connection, and the connection's error handler, which logs it,
	// runs on a goroutine of its own, so the line may follow the start's
	// end by a moment.
	refused := func() bool {
		logs := r.logs.String()
		return strings.Contains(logs, "Permissions Violation for Publish to") && strings.Contains(logs, "$JS.API.STREAM.INFO.KV_NOT_PERMITTED")
	}
	for waited := time.After(10 * time.Second); !refused(); {
		select {
		case <-waited:
			t.Fatalf("the engine refused to start, and its log names no refusal of the bucket's stream:\n%s", r.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A bucket the engine user's permissions do not cover will never open by
// trying again: the broker refuses the publish of every attempt. Opening it
// fails at once, naming the subject refused and the permission, so an
// engine refuses to start (and a standby to take over) with that message;
// before, the refusal was retried as if it were a timeout until the
// call's deadline, while the engine held the lease and answered nothing.
func TestOpeningABucketThePermissionsDoNotCoverFailsAtOnceNamingTheSubject(t *testing.T) {
	d := natstest.StartDeployed(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	opens := map[string]func() error{
		"keyvalue": func() error {
			s, err := kvjetstream.Open(ctx, kvjetstream.Config{Bucket: "NOT_PERMITTED"}, d.Connect(t, "engine_a"))
			if err == nil {
				s.Close()
			}
			return err
		},
		"objectstorage": func() error {
			s, err := objjetstream.Open(ctx, objjetstream.Config{Bucket: "NOT_PERMITTED"}, d.Connect(t, "engine_a"))
			if err == nil {
				s.Close()
			}
			return err
		},
	}
	for name, open := range opens {
		began := time.Now()
		err := open()
		took := time.Since(began)
		if err == nil {
			t.Fatalf("%s: opened a bucket the engine user may not reach", name)
		}
		// One attempt's deadline is 6 s; the call's default 30 s, the
		// test's 60 s.
		if took > 15*time.Second || !strings.Contains(err.Error(), "NOT_PERMITTED") || !strings.Contains(err.Error(), "permissions") {
			t.Fatalf("%s: the open failed after %v with %q; want at once, naming the subject refused and the permission", name, took, err)
		}
	}
}
