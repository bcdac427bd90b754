package storage_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storagepolicy"
)

// node parses an adapter's settings as they would sit in engine.yaml.
func node(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatalf("yaml %q: %v", src, err)
	}
	return doc.Content[0]
}

func block(service, adapter string) storage.Block {
	return storage.Block{Service: service, Key: "services." + service, Adapter: adapter}
}

// listFiles returns every path under dir, or nil when dir does not exist.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return out
}

func TestLocalDefaultsAreDeclaredWithoutCreatingAFile(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "engine-data")
	blocks := []storage.Block{
		block(ports.ServiceKeyValue, "sqlite"),
		block(ports.ServiceDocument, "sqlite"),
		block(ports.ServiceObjectStorage, "localfs"),
		block(ports.ServiceVectorStore, "sqlite"),
		block(ports.ServiceDocument, "memory"),
	}
	built, err := storage.Build(blocks, dataDir)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	want := []string{
		"SQLite at " + dataDir + "/kv.sqlite",
		"SQLite at " + dataDir + "/documents.sqlite",
		"files under " + dataDir + "/objects",
		"SQLite at " + dataDir + "/vectors.sqlite",
		"this process",
	}
	decls := storage.Declarations(built)
	for i, d := range decls {
		if d.Service != blocks[i].Service || d.Adapter != blocks[i].Adapter || d.Storage.LocalStorage() != want[i] {
			t.Errorf("declaration %d: %s %s %q, want %s %s %q", i, d.Service, d.Adapter, d.Storage.LocalStorage(),
				blocks[i].Service, blocks[i].Adapter, want[i])
		}
	}
	err = storagepolicy.Check("r7", decls)
	wantErr := `rollout "r7" needs shared backends, but keyvalue keeps its data in SQLite at ` + dataDir +
		`/kv.sqlite, document in SQLite at ` + dataDir + `/documents.sqlite, document in this process, object_storage in files under ` + dataDir +
		`/objects and vector_store in SQLite at ` + dataDir + `/vectors.sqlite`
	if !errors.Is(err, storagepolicy.ErrLocalBackends) || err.Error() != wantErr {
		t.Fatalf("Check:\n got %v\nwant %s", err, wantErr)
	}
	if files := listFiles(t, dataDir); files != nil {
		t.Fatalf("building declarations created %v", files)
	}
}

func TestDefaultPathsKeepTheDataDirAsWritten(t *testing.T) {
	built, err := storage.Build([]storage.Block{block(ports.ServiceKeyValue, "sqlite")}, "./.engine/")
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if got, want := built[0].Declaration.Storage.LocalStorage(), "SQLite at ./.engine/kv.sqlite"; got != want {
		t.Fatalf("LocalStorage() = %q, want %q", got, want)
	}
}

func TestAConfiguredPathWins(t *testing.T) {
	b := block(ports.ServiceVectorStore, "sqlite")
	b.Config = node(t, "path: /srv/vectors.db")
	built, err := storage.Build([]storage.Block{b}, "./.engine")
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if got := built[0].Declaration.Storage.LocalStorage(); got != "SQLite at /srv/vectors.db" {
		t.Fatalf("LocalStorage() = %q", got)
	}
}

func TestSharedBackendsPassTheCheckWithoutConnecting(t *testing.T) {
	kv := block(ports.ServiceKeyValue, "postgres")
	// Nothing listens on port 1: a factory that dialled would fail or hang.
	kv.Config = node(t, `dsn: "postgres://u:p@127.0.0.1:1/none"`)
	obj := block(ports.ServiceObjectStorage, "s3")
	obj.Config = node(t, "{endpoint: 'http://127.0.0.1:1', bucket: b, region: r, access_key: a, secret_key: s, path_style: true}")
	vec := block(ports.ServiceVectorStore, "qdrant")
	vec.Config = node(t, "{host: 127.0.0.1, port: 1}")
	doc := block(ports.ServiceDocument, "postgres")
	doc.Config = kv.Config
	off := block(ports.ServiceCache, "off")
	built, err := storage.Build([]storage.Block{kv, off, obj, vec, doc}, t.TempDir())
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if err := storagepolicy.Check("r7", storage.Declarations(built)); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if !built[1].Declaration.Off || built[1].Open != nil {
		t.Fatalf("an off service is built as %+v", built[1])
	}
}

func TestAdapterSettingsAreStrict(t *testing.T) {
	b := block(ports.ServiceVectorStore, "sqlite")
	b.Config = node(t, "path: x.db\npth: y.db\n")
	_, err := storage.Build([]storage.Block{b}, ".engine")
	if !errors.Is(err, domain.ErrInvalidConfig) || !strings.Contains(err.Error(), "line 2: unknown key services.vector_store.config.pth") {
		t.Fatalf("Build: err %v, want an unknown key at line 2", err)
	}
	m := block(ports.ServiceKeyValue, "memory")
	m.Config = node(t, "size: 3")
	if _, err := storage.Build([]storage.Block{m}, ".engine"); err == nil || !strings.Contains(err.Error(), "services.keyvalue.config.size") {
		t.Fatalf("memory adapter with settings: err %v", err)
	}
}

func TestUnknownAdapter(t *testing.T) {
	_, err := storage.Build([]storage.Block{block(ports.ServiceVectorStore, "faiss")}, ".engine")
	if !errors.Is(err, domain.ErrInvalidConfig) || !strings.Contains(err.Error(), "services.vector_store.adapter") ||
		!strings.Contains(err.Error(), "memory, qdrant, sqlite") {
		t.Fatalf("Build: err %v", err)
	}
}

// farStorage is a custom adapter's config.
type farStorage struct {
	Where string `yaml:"where"`
}

func (c farStorage) LocalStorage() string { return c.Where }

func TestCustomAdapters(t *testing.T) {
	opened := 0
	err := storage.RegisterCustom(ports.ServiceVectorStore, "far", func(b storage.Block, env storage.Env) (storage.Built, error) {
		var c farStorage
		if err := storage.Decode(b.Config, &c, b.Key+".config"); err != nil {
			return storage.Built{}, err
		}
		return storage.Built{Declaration: storagepolicy.Declaration{Storage: c}}, nil
	})
	if err != nil {
		t.Fatalf("RegisterCustom: %v", err)
	}
	if err := storage.RegisterCustom(ports.ServiceVectorStore, "far", nil); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("RegisterCustom without a factory: err %v", err)
	}
	dup := func(storage.Block, storage.Env) (storage.Built, error) { opened++; return storage.Built{}, nil }
	if err := storage.RegisterCustom(ports.ServiceVectorStore, "far", dup); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("RegisterCustom twice: err %v, want ErrConflict", err)
	}
	custom := func(shared bool, settings string) storage.Block {
		b := block(ports.ServiceVectorStore, "custom")
		b.Name, b.SharedStorage, b.Config = "far", shared, node(t, settings)
		return b
	}
	built, err := storage.Build([]storage.Block{custom(true, "where: ''")}, ".engine")
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	d := built[0].Declaration
	if !d.Custom || !d.SharedStorage || d.Adapter != "far" || d.Service != ports.ServiceVectorStore {
		t.Fatalf("custom declaration %+v", d)
	}
	if err := storagepolicy.Check("r7", storage.Declarations(built)); err != nil {
		t.Fatalf("Check with shared_storage: %v", err)
	}
	built, err = storage.Build([]storage.Block{custom(false, "where: ''")}, ".engine")
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if err := storagepolicy.Check("r7", storage.Declarations(built)); !errors.Is(err, storagepolicy.ErrLocalBackends) ||
		!strings.Contains(err.Error(), `the custom adapter "far"`) {
		t.Fatalf("Check without shared_storage: %v", err)
	}
	unknown := custom(true, "where: x")
	unknown.Name = "near"
	if _, err := storage.Build([]storage.Block{unknown}, ".engine"); !errors.Is(err, domain.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "services.vector_store.name") {
		t.Fatalf("Build of an unregistered custom adapter: err %v", err)
	}
	if opened != 0 {
		t.Fatalf("a refused registration was used")
	}
}

func TestOpenOpensInOrderAndCloses(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	built, err := storage.Build([]storage.Block{
		block(ports.ServiceKeyValue, "memory"),
		block(ports.ServiceDocument, "off"),
		block(ports.ServiceVectorStore, "sqlite"),
	}, dataDir)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	opened, err := storage.Open(t.Context(), built)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if len(opened) != 2 {
		t.Fatalf("opened %d services, want 2 (document is off)", len(opened))
	}
	if _, ok := opened[0].Port.(ports.KeyValue); !ok {
		t.Fatalf("keyvalue opened as %T", opened[0].Port)
	}
	vs, ok := opened[1].Port.(ports.VectorStore)
	if !ok {
		t.Fatalf("vector_store opened as %T", opened[1].Port)
	}
	if err := vs.CreateCollection(t.Context(), "docs", 2, ports.MetricDot); err != nil {
		t.Fatalf("CreateCollection: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "vectors.sqlite")); err != nil {
		t.Fatalf("the sqlite vector store is not under the data dir: %v", err)
	}
	if err := storage.Close(opened); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
