package nats_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// sqliteFile writes an engine.yaml for a deployed user whose keyvalue,
// document and vector stores are SQLite files under dataDir, and returns
// its path.
func sqliteFile(t *testing.T, d *natstest.Deployed, user, dataDir string) string {
	t.Helper()
	return dataDirFile(t, d, user, dataDir, `  keyvalue: {adapter: sqlite}
  document: {adapter: sqlite}
  object_storage: {adapter: memory}
  vector_store: {adapter: sqlite}
  cache: {adapter: memory}
`)
}

// dataDirFile writes an engine.yaml for a deployed user with the given
// services under dataDir, and returns its path.
func dataDirFile(t *testing.T, d *natstest.Deployed, user, dataDir, services string) string {
	t.Helper()
	src := fmt.Sprintf(`nats:
  url: %q
  credentials: {user: %s, password: %q}
  engine: {role: serve, lease_seconds: 1, drain_seconds: 1}
http: {listen: "off"}
data_dir: %q
services:
%s`, d.Server.ClientURL(), user, natstest.Password(user), dataDir, services)
	path := filepath.Join(t.TempDir(), "engine.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The SQLite files of a data_dir keep the data, the fence and the kept
// reads of one account's lease. An engine of another account given the
// same data_dir must not start on them: it would serve the first
// account's keys to its own callers, and raise the fence with tokens of
// its own lease, which refuses the first account's engine every write.
// A new engine of the first account, as a deploy starts, opens them.
func TestAnEngineOfAnotherAccountDoesNotOpenTheSQLiteFilesOfADataDir(t *testing.T) {
	d := natstest.StartDeployed(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	a := startEngine(t, sqliteFile(t, d, "engine_a", dataDir))
	if a.Outcome() != domain.OutcomeServe {
		t.Fatalf("A's engine: %v, want it to serve", a.Outcome())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	kvA := natsclient.NewKeyValue(natsclient.New(d.Connect(t, "caller_a")))
	if err := kvA.Set(ctx, "greeting", []byte("from A"), 0); err != nil {
		t.Fatalf("set through A's caller: %v", err)
	}

	b := newEngine(t, sqliteFile(t, d, "engine_b", dataDir))
	err := b.app.Start(ctx)
	if err == nil {
		kvB := natsclient.NewKeyValue(natsclient.New(d.Connect(t, "caller_b")))
		v, gerr := kvB.Get(ctx, "greeting")
		b.app.RequireStop()
		t.Fatalf("an engine of TEAM_B started on TEAM_A's data_dir; B's caller reads A's key: %q, %v", v, gerr)
	}
	for _, want := range []string{`"TEAM_A"`, `"TEAM_B"`, dataDir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("B's refusal %q does not name %s", err, want)
		}
	}
	if err := kvA.Set(ctx, "greeting", []byte("from A again"), 0); err != nil {
		t.Fatalf("A's engine cannot write after B's refusal: %v", err)
	}
	a.app.RequireStop()

	next := newEngine(t, sqliteFile(t, d, "engine_a", dataDir))
	next.app.RequireStart()
	t.Cleanup(func() { next.app.RequireStop(); next.noRefusals(t) })
	if v, err := kvA.Get(ctx, "greeting"); err != nil || string(v) != "from A again" {
		t.Fatalf("the next engine of TEAM_A reads %q, %v; want \"from A again\"", v, err)
	}
}

// The objects directory of a data_dir is one account's as its SQLite
// files are: an engine of another account must not serve them to its own
// callers.
func TestAnEngineOfAnotherAccountDoesNotOpenTheObjectsOfADataDir(t *testing.T) {
	d := natstest.StartDeployed(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	services := `  keyvalue: {adapter: memory}
  document: {adapter: memory}
  object_storage: {adapter: localfs}
  vector_store: {adapter: memory}
  cache: {adapter: memory}
`
	a := startEngine(t, dataDirFile(t, d, "engine_a", dataDir, services))
	if a.Outcome() != domain.OutcomeServe {
		t.Fatalf("A's engine: %v, want it to serve", a.Outcome())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	objA := natsclient.NewObjectStorage(natsclient.New(d.Connect(t, "caller_a")))
	if _, err := objA.Put(ctx, "report", strings.NewReader("A's report"), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("put through A's caller: %v", err)
	}

	b := newEngine(t, dataDirFile(t, d, "engine_b", dataDir, services))
	err := b.app.Start(ctx)
	if err == nil {
		objB := natsclient.NewObjectStorage(natsclient.New(d.Connect(t, "caller_b")))
		body, info, gerr := objB.Get(ctx, "report", ports.GetObjectOptions{})
		if body != nil {
			_ = body.Close()
		}
		b.app.RequireStop()
		t.Fatalf("an engine of TEAM_B started on TEAM_A's data_dir; B's caller finds A's object: %+v, %v", info, gerr)
	}
	for _, want := range []string{`"TEAM_A"`, `"TEAM_B"`, dataDir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("B's refusal %q does not name %s", err, want)
		}
	}
}
