package enginecmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

// sharedDocs is a document adapter every engine the commands start opens
// on the same store.
type sharedDocs struct{ *docmemory.Store }

func (sharedDocs) Close() error { return nil }

var sharedDocuments *docmemory.Store

type sharedDocsConfig struct{}

func (sharedDocsConfig) LocalStorage() string { return "" }

func init() {
	storage.Register(ports.ServiceDocument, "shared", func(_ context.Context, _ sharedDocsConfig) (sharedDocs, error) {
		return sharedDocs{sharedDocuments}, nil
	})
}

// doc put --if-version N, N above 0, into a collection that does not exist
// fails naming the version and makes no collection: no document there is
// at that version. Before, the command made the collection first, so a
// misspelt collection's name stayed behind the refused write for good.
func TestAConditionalDocPutToAMissingCollectionMakesNone(t *testing.T) {
	sharedDocuments = docmemory.New() // each run its own, -count=3 too
	srv := natstest.StartServer(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf("nats:\n  url: %s\n  engine: {lease_seconds: 1, drain_seconds: 1}\nhttp: {listen: \"off\"}\ndata_dir: %s\n"+
		"services:\n  document: {adapter: shared}\n  vector_store: {adapter: off}\n",
		srv.ClientURL(), filepath.Join(dir, "data"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ABI_ENGINE_ROLE", "")
	var stderr bytes.Buffer
	code := Run([]string{"doc", "put", "peopel", "ada", `{"name":"Ada"}`, "--if-version", "3", "--config", cfg}, io.Discard, &stderr, Options{})
	if code != exitError || !strings.Contains(stderr.String(), "not at version 3") {
		t.Fatalf("doc put --if-version 3 into a missing collection: exit %d, stderr %q", code, stderr.String())
	}
	names, err := sharedDocuments.Collections(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, "peopel") {
		t.Fatalf("after a refused conditional doc put the collections are %q, the one it named among them", names)
	}
	stderr.Reset()
	if code := Run([]string{"doc", "put", "people", "ada", `{"name":"Ada"}`, "--if-version", "0", "--config", cfg}, io.Discard, &stderr, Options{}); code != exitOK {
		t.Fatalf("doc put --if-version 0 into a new collection: exit %d: %s", code, stderr.String())
	}
}
