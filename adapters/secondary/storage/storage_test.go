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

func TestCacheTiersAreAsLocalAsTheirService(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	err := storage.RegisterCustom(ports.ServiceKeyValue, "far-kv", func(b storage.Block, env storage.Env) (storage.Built, error) {
		return storage.Built{Declaration: storagepolicy.Declaration{Storage: farStorage{Where: "somewhere here"}}}, nil
	})
	if err != nil {
		t.Fatalf("RegisterCustom: %v", err)
	}
	custom := func(shared bool) storage.Block {
		b := block(ports.ServiceKeyValue, "custom")
		b.Name, b.SharedStorage = "far-kv", shared
		return b
	}
	pg := block(ports.ServiceKeyValue, "postgres")
	pg.Config = node(t, `dsn: "postgres://u:p@127.0.0.1:1/none"`)
	for _, c := range []struct {
		name    string
		service storage.Block
		tier    string
		want    string
	}{
		{"sqlite keyvalue", block(ports.ServiceKeyValue, "sqlite"), "keyvalue", "keyvalue tier on the keyvalue service: SQLite at " + dataDir + "/kv.sqlite"},
		{"postgres keyvalue", pg, "keyvalue", ""},
		{"shared custom keyvalue", custom(true), "keyvalue", ""},
		{"local custom keyvalue", custom(false), "keyvalue", "keyvalue tier on the keyvalue service: somewhere here"},
		{"localfs objects", block(ports.ServiceObjectStorage, "localfs"), "object_storage", "object_storage tier on the object_storage service: files under " + dataDir + "/objects"},
		{"memory cache", block(ports.ServiceDocument, "postgres"), "memory", "this process"},
	} {
		t.Run(c.name, func(t *testing.T) {
			built, err := storage.Build([]storage.Block{c.service, block(ports.ServiceCache, c.tier)}, dataDir)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			d := built[1].Declaration
			if d.Service != ports.ServiceCache || d.Adapter != c.tier || d.Storage.LocalStorage() != c.want {
				t.Fatalf("cache declaration %s %s %q, want cache %s %q", d.Service, d.Adapter, d.Storage.LocalStorage(), c.tier, c.want)
			}
			err = storagepolicy.Check("r7", storage.Declarations(built[1:]))
			if c.want == "" && err != nil {
				t.Fatalf("Check of a tier on a shared service: %v", err)
			}
			if c.want != "" && (!errors.Is(err, storagepolicy.ErrLocalBackends) || !strings.Contains(err.Error(), "cache keeps its data in "+c.want)) {
				t.Fatalf("Check of a local tier: %v", err)
			}
		})
	}
	if files := listFiles(t, dataDir); files != nil {
		t.Fatalf("building declarations created %v", files)
	}
}

func TestACacheTierNeedsItsService(t *testing.T) {
	for _, blocks := range [][]storage.Block{
		{block(ports.ServiceCache, "keyvalue")},
		{block(ports.ServiceKeyValue, "off"), block(ports.ServiceCache, "keyvalue")},
		{block(ports.ServiceKeyValue, "memory"), block(ports.ServiceCache, "object_storage")},
	} {
		_, err := storage.Build(blocks, ".engine")
		if !errors.Is(err, domain.ErrInvalidConfig) || !strings.Contains(err.Error(), "services.cache.adapter") || !strings.Contains(err.Error(), "which is off") {
			t.Errorf("Build %+v: err %v, want the tier's service named as off", blocks, err)
		}
	}
	tiered := block(ports.ServiceCache, "keyvalue")
	tiered.Config = node(t, "prefix: c/\nttl: 3")
	_, err := storage.Build([]storage.Block{block(ports.ServiceKeyValue, "memory"), tiered}, ".engine")
	if !errors.Is(err, domain.ErrInvalidConfig) || !strings.Contains(err.Error(), "services.cache.config.ttl") {
		t.Fatalf("a tier's settings are not strict: err %v", err)
	}
}

func TestCacheTiersOpenOverTheirService(t *testing.T) {
	for _, c := range []struct {
		service storage.Block
		tier    string
	}{
		{block(ports.ServiceKeyValue, "memory"), "keyvalue"},
		{block(ports.ServiceObjectStorage, "memory"), "object_storage"},
		{block(ports.ServiceDocument, "memory"), "memory"},
	} {
		t.Run(c.tier, func(t *testing.T) {
			tiered := block(ports.ServiceCache, c.tier)
			if c.tier != "memory" {
				tiered.Config = node(t, "prefix: tier/")
			}
			built, err := storage.Build([]storage.Block{c.service, tiered}, t.TempDir())
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			opened, err := storage.Open(t.Context(), built)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = storage.Close(opened) })
			cache, ok := opened[1].Port.(ports.Cache)
			if !ok {
				t.Fatalf("cache opened as %T", opened[1].Port)
			}
			if err := cache.Set(t.Context(), "k", []byte("v"), 0); err != nil {
				t.Fatalf("Set: %v", err)
			}
			if v, err := cache.Get(t.Context(), "k"); err != nil || string(v) != "v" {
				t.Fatalf("Get = %q, %v", v, err)
			}
			switch under := opened[0].Port.(type) {
			case ports.KeyValue:
				keys, _, err := under.ListKeys(t.Context(), "tier/", 10, "")
				if err != nil || len(keys) != 1 {
					t.Fatalf("the entry is not in the keyvalue service under the tier's prefix: %q, %v", keys, err)
				}
			case ports.ObjectStorage:
				keys, _, err := under.List(t.Context(), "tier/", 10, "")
				if err != nil || len(keys) != 1 {
					t.Fatalf("the entry is not in the object store under the tier's prefix: %v, %v", keys, err)
				}
			}
		})
	}
}

func TestSecretSources(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(path, []byte("DB_PASSWORD=from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ABI_TEST_REGISTRY_DB_PASSWORD", "from-env")
	env := block(ports.ServiceSecret, "env")
	env.Config = node(t, "prefix: ABI_TEST_REGISTRY_")
	dotenv := block(ports.ServiceSecret, "dotenv")
	dotenv.Key = "services.secret[1]"
	dotenv.Config = node(t, "path: "+path)
	built, err := storage.Build([]storage.Block{env, dotenv}, t.TempDir())
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	for _, d := range storage.Declarations(built) {
		if d.Storage.LocalStorage() != "" {
			t.Fatalf("secret source %s declares %q, want \"\"", d.Adapter, d.Storage.LocalStorage())
		}
	}
	opened, err := storage.Open(t.Context(), built)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = storage.Close(opened) })
	for i, want := range []string{"from-env", "from-file"} {
		s, ok := opened[i].Port.(ports.Secrets)
		if !ok {
			t.Fatalf("secret source %d opened as %T", i, opened[i].Port)
		}
		if v, err := s.Get(t.Context(), "DB_PASSWORD"); err != nil || v != want {
			t.Fatalf("secret source %d: Get = %q, %v; want %q", i, v, err, want)
		}
	}
	bad := block(ports.ServiceSecret, "dotenv")
	bad.Config = node(t, "file: x")
	if _, err := storage.Build([]storage.Block{bad}, "."); !errors.Is(err, domain.ErrInvalidConfig) || !strings.Contains(err.Error(), "services.secret.config.file") {
		t.Fatalf("dotenv with an unknown key: err %v", err)
	}
}
