package storage_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/storage"
	vecmemory "github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
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

// A setting an adapter cannot open with (no DSN, bucket, host or file; a
// path SQLite misreads; a cache prefix no key fits after) is refused when
// the configuration is built, naming its key, as
// `engine config check` promises before a deploy: a ${VAR} missing from a
// deploy's Secret leaves it empty. Before, such a block passed the check
// and the engine claimed the lease, or stood by, and then failed to open.
func TestMissingRequiredSettingsAreRefusedBeforeAnythingOpens(t *testing.T) {
	for _, c := range []struct {
		service, adapter, config, want string
	}{
		{ports.ServiceKeyValue, "postgres", `{dsn: "", table: kv}`, "services.keyvalue.config.dsn is empty"},
		{ports.ServiceDocument, "postgres", `{table: docs}`, "services.document.config.dsn is empty"},
		{ports.ServiceKeyValue, "postgres", `{dsn: "postgres://u:p@127.0.0.1:1/x", table: "Bad-Name"}`, "services.keyvalue.config.table"},
		{ports.ServiceObjectStorage, "s3", `{endpoint: "http://127.0.0.1:1"}`, "services.object_storage.config.bucket is empty"},
		{ports.ServiceObjectStorage, "s3", `{bucket: b, access_key: a}`, "services.object_storage.config.access_key and secret_key"},
		{ports.ServiceVectorStore, "qdrant", `{port: 6334}`, "services.vector_store.config.host is empty"},
		{ports.ServiceVectorStore, "qdrant", `{host: q, port: 70000}`, "services.vector_store.config.port"},
		{ports.ServiceSecret, "dotenv", `{path: ""}`, "services.secret.config.path is empty"},
		{ports.ServiceKeyValue, "sqlite", `{path: "kv.sqlite?mode=memory"}`, "services.keyvalue.config.path"},
		{ports.ServiceVectorStore, "sqlite", `{path: "v.sqlite?x"}`, "services.vector_store.config.path"},
		{ports.ServiceCache, "keyvalue", `{prefix: "` + strings.Repeat("p", 1000) + `"}`, "services.cache.config.prefix is 1000 bytes"},
		{ports.ServiceCache, "memory", `{max_bytes: -1}`, "services.cache.config.max_bytes is -1"},
		{ports.ServiceKeyValue, "memory", `{max_bytes: -1}`, "services.keyvalue.config.max_bytes is -1"},
		{ports.ServiceDocument, "memory", `{max_bytes: -1}`, "services.document.config.max_bytes is -1"},
		{ports.ServiceVectorStore, "memory", `{max_bytes: -1}`, "services.vector_store.config.max_bytes is -1"},
	} {
		b := block(c.service, c.adapter)
		b.Config = node(t, c.config)
		blocks := []storage.Block{b}
		if c.service == ports.ServiceCache {
			blocks = []storage.Block{block(ports.ServiceKeyValue, "memory"), b}
		}
		_, err := storage.Build(blocks, t.TempDir())
		if !errors.Is(err, domain.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Build %s %s %s: err %v, want an invalid configuration naming %q", c.service, c.adapter, c.config, err, c.want)
		}
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

// farStorage is the configuration of adapters this test registers, as a
// program would register its own.
type farStorage struct {
	Where  string `yaml:"where"`
	Token  string `yaml:"token" secret:"true"`
	Nested struct {
		Password string `yaml:"password" secret:"true"`
		Shown    string `yaml:"shown"`
	} `yaml:"nested"`
}

func (c farStorage) LocalStorage() string { return c.Where }

func openFarVectors(ctx context.Context, _ farStorage) (*vecmemory.Store, error) {
	return vecmemory.Open(ctx, vecmemory.Config{})
}

func openFarKV(ctx context.Context, _ farStorage) (*kvmemory.Store, error) {
	return kvmemory.Open(ctx, kvmemory.Config{})
}

// Registration is once per process, as in a program's init, so the tests
// also pass with -count above 1.
func init() {
	storage.Register(ports.ServiceVectorStore, "far", openFarVectors)
	storage.Register(ports.ServiceKeyValue, "far-kv", openFarKV)
}

// registerPanics calls Register and returns what it panicked with.
func registerPanics(register func()) (msg string) {
	defer func() { msg = fmt.Sprint(recover()) }()
	register()
	return ""
}

func TestRegisterRefusesMistakes(t *testing.T) {
	for _, c := range []struct {
		name     string
		register func()
		want     string
	}{
		{"Twice", func() { storage.Register(ports.ServiceVectorStore, "far", openFarVectors) }, "registered twice"},
		{"TheNameOff", func() { storage.Register(ports.ServiceVectorStore, "off", openFarVectors) }, "empty or reserved"},
		{"NoName", func() { storage.Register(ports.ServiceVectorStore, "", openFarVectors) }, "empty or reserved"},
		{"AnUnknownService", func() { storage.Register("blobs", "far", openFarVectors) }, "no such service"},
		{"AStoreOfAnotherPort", func() { storage.Register(ports.ServiceKeyValue, "wrong", openFarVectors) }, "does not implement ports.KeyValue"},
		{"NoOpen", func() { storage.Register[farStorage, *kvmemory.Store](ports.ServiceKeyValue, "nil", nil) }, "open is nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := registerPanics(c.register); !strings.Contains(got, c.want) {
				t.Fatalf("Register panicked with %q, want %q", got, c.want)
			}
		})
	}
	if got := storage.Adapters(ports.ServiceKeyValue); slices.Contains(got, "wrong") || slices.Contains(got, "nil") {
		t.Fatalf("a refused registration is listed: %q", got)
	}
}

func TestRegisteredAdaptersBuildLikeBuiltIns(t *testing.T) {
	if got := storage.Adapters(ports.ServiceVectorStore); !slices.Equal(got, []string{"far", "memory", "qdrant", "sqlite"}) {
		t.Fatalf("vector_store adapters %q", got)
	}
	far := func(settings string) storage.Block {
		b := block(ports.ServiceVectorStore, "far")
		b.Config = node(t, settings)
		return b
	}
	built, err := storage.Build([]storage.Block{far("where: ''")}, ".engine")
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if d := built[0].Declaration; d.Adapter != "far" || d.Service != ports.ServiceVectorStore {
		t.Fatalf("declaration %+v", d)
	}
	if err := storagepolicy.Check("r7", storage.Declarations(built)); err != nil {
		t.Fatalf("Check of an adapter on a shared backend: %v", err)
	}
	opened, err := storage.Open(t.Context(), built)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, ok := opened[0].Port.(ports.VectorStore); !ok {
		t.Fatalf("opened as %T", opened[0].Port)
	}
	if err := storage.Close(opened); err != nil {
		t.Fatalf("Close: %v", err)
	}
	built, err = storage.Build([]storage.Block{far("where: a file here")}, ".engine")
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if err := storagepolicy.Check("r7", storage.Declarations(built)); !errors.Is(err, storagepolicy.ErrLocalBackends) ||
		!strings.Contains(err.Error(), "vector_store keeps its data in a file here") {
		t.Fatalf("Check of an adapter with local data: %v", err)
	}
	if _, err := storage.Build([]storage.Block{far("where: x\nwhen: now")}, ".engine"); err == nil {
		t.Fatalf("Build accepted an unknown key")
	}
	bad := far("nested: {shown: x, color: red}")
	if _, err := storage.Build([]storage.Block{bad}, ".engine"); !errors.Is(err, domain.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "unknown key services.vector_store.config.nested.color") {
		t.Fatalf("Build of an unknown nested key: err %v", err)
	}
	if _, err := storage.Build([]storage.Block{block(ports.ServiceVectorStore, "near")}, ".engine"); !errors.Is(err, domain.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), `"near": want one of far, memory, qdrant, sqlite or off`) {
		t.Fatalf("Build of an unregistered adapter: err %v", err)
	}
}

func TestMaskSecretsFollowsTheConfigsTags(t *testing.T) {
	n := node(t, "where: here\ntoken: tok\nnested: {password: pw, shown: visible}\n")
	storage.MaskSecrets(ports.ServiceVectorStore, "far", n)
	out, err := yaml.Marshal(n)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	for _, secret := range []string{"tok", "pw"} {
		if strings.Contains(string(out), ": "+secret+"\n") || strings.Contains(string(out), ": "+secret+",") {
			t.Errorf("masked settings show %q:\n%s", secret, out)
		}
	}
	for _, shown := range []string{"where: here", "shown: visible", "token: '***'", "password: '***'"} {
		if !strings.Contains(string(out), shown) {
			t.Errorf("masked settings lack %q:\n%s", shown, out)
		}
	}
	// A field named like a secret is not masked unless its adapter says so.
	kv := node(t, "password: not-a-secret-here\n")
	storage.MaskSecrets(ports.ServiceKeyValue, "memory", kv)
	if out, _ := yaml.Marshal(kv); !strings.Contains(string(out), "not-a-secret-here") {
		t.Errorf("a field without the tag was masked:\n%s", out)
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
	farKV := func(where string) storage.Block {
		b := block(ports.ServiceKeyValue, "far-kv")
		b.Config = node(t, "where: "+where)
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
		{"shared registered keyvalue", farKV("''"), "keyvalue", ""},
		{"local registered keyvalue", farKV("somewhere here"), "keyvalue", "keyvalue tier on the keyvalue service: somewhere here"},
		{"localfs objects", block(ports.ServiceObjectStorage, "localfs"), "object_storage", "object_storage tier on the object_storage service: files under " + dataDir + "/objects"},
		{"memory cache", func() storage.Block { b := block(ports.ServiceDocument, "postgres"); b.Config = pg.Config; return b }(), "memory", "this process"},
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

// The JetStream adapters are shared, name their bucket and replicas, check
// their settings when built, and dial nothing until they open.
func TestJetStreamAdaptersAreSharedAndCheckedWithoutConnecting(t *testing.T) {
	kv := block(ports.ServiceKeyValue, "jetstream")
	kv.Config = node(t, "{bucket: KV_TEST, replicas: 3}")
	dialed := 0
	env := storage.Env{NATS: func(string) (*nats.Conn, error) {
		dialed++
		return nil, errors.New("no broker in this test")
	}}
	built, err := storage.BuildEnv([]storage.Block{kv}, env)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if err := storagepolicy.Check("r7", storage.Declarations(built)); err != nil {
		t.Fatalf("Check: %v", err)
	}
	d, ok := built[0].Declaration.Storage.(interface{ Describe() string })
	if !ok || d.Describe() != "JetStream bucket KV_TEST, 3 replica(s)" {
		t.Fatalf("declaration %+v does not describe the bucket", built[0].Declaration.Storage)
	}
	if dialed != 0 {
		t.Fatalf("Build dialed NATS %d times", dialed)
	}
	if _, err := storage.Open(t.Context(), built); err == nil || dialed != 1 {
		t.Fatalf("Open without a broker: err %v after %d dials; want the dial's error", err, dialed)
	}

	bad := block(ports.ServiceKeyValue, "jetstream")
	bad.Config = node(t, "{replicas: 2}")
	if _, err := storage.BuildEnv([]storage.Block{bad}, env); !errors.Is(err, domain.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "services.keyvalue.config.replicas is 2") {
		t.Fatalf("Build with 2 replicas: err %v, want one naming services.keyvalue.config.replicas", err)
	}
}

func TestJetStreamAdaptersOpenOnTheDialedBroker(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	built, err := storage.BuildEnv([]storage.Block{block(ports.ServiceKeyValue, "jetstream")}, storage.Env{
		NATS: func(string) (*nats.Conn, error) { return nats.Connect(url) },
	})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	opened, err := storage.Open(t.Context(), built)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer storage.Close(opened)
	kv := opened[0].Port.(ports.KeyValue)
	if err := kv.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatalf("Set: %v", err)
	}
	js, _ := jetstream.New(natstest.Connect(t, url))
	if _, err := js.KeyValue(t.Context(), "ABI_KV"); err != nil {
		t.Fatalf("the default bucket ABI_KV: %v", err)
	}
}

// clusterStorage is the configuration of an adapter on several servers:
// its settings hold lists and maps of blocks, as a program's adapter may.
type clusterStorage struct {
	Nodes []struct {
		Addr     string `yaml:"addr"`
		Password string `yaml:"password" secret:"true"`
	} `yaml:"nodes"`
	Shards map[string]struct {
		Addr string `yaml:"addr"`
	} `yaml:"shards"`
	Tokens []string `yaml:"tokens" secret:"true"`
}

func (clusterStorage) LocalStorage() string { return "" }

func openClusterKV(ctx context.Context, _ clusterStorage) (*kvmemory.Store, error) {
	return kvmemory.Open(ctx, kvmemory.Config{})
}

func init() {
	storage.Register(ports.ServiceKeyValue, "cluster", openClusterKV)
}

// Settings are strict at any depth, inside a list or a map of blocks too:
// a misspelt key in the second server of a list would otherwise be
// dropped without a word, and that server would run without the setting.
func TestAdapterSettingsAreStrictInsideListsAndMaps(t *testing.T) {
	for _, c := range []struct{ settings, want string }{
		{"nodes: [{addr: a}, {addr: b, pasword: pw}]", "line 1: unknown key services.keyvalue.config.nodes[1].pasword"},
		{"shards:\n  east: {addr: a}\n  west: {adr: b}\n", "line 3: unknown key services.keyvalue.config.shards.west.adr"},
	} {
		b := block(ports.ServiceKeyValue, "cluster")
		b.Config = node(t, c.settings)
		if _, err := storage.Build([]storage.Block{b}, ".engine"); !errors.Is(err, domain.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Build of %q: err %v, want %q", c.settings, err, c.want)
		}
	}
	good := block(ports.ServiceKeyValue, "cluster")
	good.Config = node(t, "nodes: [{addr: a, password: pw}]\nshards: {east: {addr: a}}\ntokens: [t1]\n")
	if _, err := storage.Build([]storage.Block{good}, ".engine"); err != nil {
		t.Fatalf("Build of valid settings: %v", err)
	}
}

// A field tagged secret:"true" is masked wherever it sits: in each block
// of a list, and whole when its value is a list itself. engine config
// check prints what MaskSecrets leaves, so anything left is shown.
func TestMaskSecretsReachesListsAndListValues(t *testing.T) {
	n := node(t, "nodes:\n  - {addr: a, password: pw-one}\n  - {addr: b, password: pw-two}\ntokens: [tok-one, tok-two]\n")
	storage.MaskSecrets(ports.ServiceKeyValue, "cluster", n)
	out, err := yaml.Marshal(n)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	for _, secret := range []string{"pw-one", "pw-two", "tok-one", "tok-two"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("masked settings show %q:\n%s", secret, out)
		}
	}
	for _, shown := range []string{"addr: a", "addr: b", "password: '***'", "tokens: '***'"} {
		if !strings.Contains(string(out), shown) {
			t.Errorf("masked settings lack %q:\n%s", shown, out)
		}
	}
}

// serverSettings are settings several adapters of a program share, inlined
// into each Config as yaml.v3 allows.
type serverSettings struct {
	Addr     string `yaml:"addr"`
	Password string `yaml:"password" secret:"true"`
}

// inlineStorage inlines the shared settings beside its own.
type inlineStorage struct {
	serverSettings `yaml:",inline"`
	Prefix         string `yaml:"prefix"`
}

func (inlineStorage) LocalStorage() string { return "" }

func openInlineKV(ctx context.Context, c inlineStorage) (*inlineKV, error) {
	s, err := kvmemory.Open(ctx, kvmemory.Config{})
	return &inlineKV{Store: s, addr: c.Addr}, err
}

// inlineKV remembers the address it was given, so the test sees what the
// block decoded into.
type inlineKV struct {
	*kvmemory.Store
	addr string
}

func init() {
	storage.Register(ports.ServiceKeyValue, "inline", openInlineKV)
}

// The keys of a struct inlined into a Config (yaml:",inline") are the
// Config's own: the block decodes them, refuses a misspelt one, and masks
// the secret among them.
func TestInlinedSettingsAreTheConfigsOwn(t *testing.T) {
	b := block(ports.ServiceKeyValue, "inline")
	b.Config = node(t, "addr: db:6379\npassword: pw-inline\nprefix: p\n")
	built, err := storage.Build([]storage.Block{b}, ".engine")
	if err != nil {
		t.Fatalf("Build of inlined settings: %v", err)
	}
	opened, err := storage.Open(t.Context(), built)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = storage.Close(opened) })
	if got := opened[0].Port.(*inlineKV).addr; got != "db:6379" {
		t.Fatalf("the store was opened with addr %q, want db:6379", got)
	}
	bad := block(ports.ServiceKeyValue, "inline")
	bad.Config = node(t, "adr: db:6379\n")
	if _, err := storage.Build([]storage.Block{bad}, ".engine"); !errors.Is(err, domain.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "unknown key services.keyvalue.config.adr") {
		t.Fatalf("Build of a misspelt inlined key: err %v", err)
	}
	storage.MaskSecrets(ports.ServiceKeyValue, "inline", b.Config)
	if out, _ := yaml.Marshal(b.Config); strings.Contains(string(out), "pw-inline") || !strings.Contains(string(out), "addr: db:6379") {
		t.Fatalf("masked inlined settings:\n%s", out)
	}
}

// credentials are settings a Config inlines whole as its secret, without
// a tag on each of their own fields.
type credentials struct {
	User     string `yaml:"user"`
	Password string `yaml:"password"`
}

// secretInlineStorage inlines its credentials, and a map of driver options
// that takes every other key, both tagged secret.
type secretInlineStorage struct {
	Addr        string `yaml:"addr"`
	credentials `yaml:",inline" secret:"true"`
	Options     map[string]string `yaml:",inline" secret:"true"`
}

func (secretInlineStorage) LocalStorage() string { return "" }

func openSecretInlineKV(ctx context.Context, _ secretInlineStorage) (*kvmemory.Store, error) {
	return kvmemory.Open(ctx, kvmemory.Config{})
}

func init() {
	storage.Register(ports.ServiceKeyValue, "secret-inline", openSecretInlineKV)
}

// An inlined field tagged secret is a secret setting like any other: the
// keys it takes are masked wherever the configuration is shown. Before,
// the tag was read from the inlined struct's own fields only, and an
// inlined map's keys were never masked, so config check printed them.
func TestTheKeysOfAnInlinedSecretAreMasked(t *testing.T) {
	b := block(ports.ServiceKeyValue, "secret-inline")
	b.Config = node(t, "addr: db:6379\nuser: u-inline\npassword: pw-inline\nsslkey: key-inline\n")
	if _, err := storage.Build([]storage.Block{b}, ".engine"); err != nil {
		t.Fatalf("Build: %v", err)
	}
	storage.MaskSecrets(ports.ServiceKeyValue, "secret-inline", b.Config)
	out, _ := yaml.Marshal(b.Config)
	for _, secret := range []string{"u-inline", "pw-inline", "key-inline"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("masked settings show %s:\n%s", secret, out)
		}
	}
	if !strings.Contains(string(out), "addr: db:6379") {
		t.Errorf("masked settings lost addr:\n%s", out)
	}
}

// kvCloser is a store's type as an adapter may declare it: an interface.
type kvCloser interface {
	ports.KeyValue
	Close() error
}

func init() {
	storage.Register(ports.ServiceKeyValue, "no-store", func(context.Context, farStorage) (*kvmemory.Store, error) { return nil, nil })
	storage.Register(ports.ServiceKeyValue, "no-store-interface", func(context.Context, farStorage) (kvCloser, error) { return nil, nil })
}

// An adapter's Open that returns neither a store nor an error is a bug in
// the adapter: opening fails, naming the service and the adapter, before
// an engine serves a store that would panic at its first call, and what
// opened before it is closed.
func TestAnAdapterWhoseOpenReturnsNoStoreFailsToOpen(t *testing.T) {
	for _, adapter := range []string{"no-store", "no-store-interface"} {
		t.Run(adapter, func(t *testing.T) {
			built, err := storage.Build([]storage.Block{
				block(ports.ServiceVectorStore, "far"),
				block(ports.ServiceKeyValue, adapter),
			}, ".engine")
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			var opened []storage.Opened
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("Open panicked: %v", p)
					}
				}()
				opened, err = storage.Open(t.Context(), built)
			}()
			if err == nil {
				_ = storage.Close(opened)
				t.Fatalf("Open of an adapter whose Open returned no store and no error succeeded, with %T", opened[len(opened)-1].Port)
			}
			if want := fmt.Sprintf("open keyvalue (%s): the adapter's Open returned no store and no error", adapter); !strings.Contains(err.Error(), want) {
				t.Fatalf("Open: %v; want it to say %q", err, want)
			}
		})
	}
}

// loggedStorage is the Config of an adapter that takes the engine's
// logger; openLoggedKV hands the logger it got to the test.
type loggedStorage struct {
	Where  string       `yaml:"where"`
	Logger *slog.Logger `yaml:"-"`
}

func (c loggedStorage) LocalStorage() string { return c.Where }

func (c *loggedStorage) SetLogger(log *slog.Logger) { c.Logger = log }

var openedWith = make(chan *slog.Logger, 1)

func openLoggedKV(ctx context.Context, c loggedStorage) (*kvmemory.Store, error) {
	openedWith <- c.Logger
	return kvmemory.Open(ctx, kvmemory.Config{})
}

func init() {
	storage.Register(ports.ServiceKeyValue, "logged", openLoggedKV)
}

// An adapter whose Config takes a logger (storage.LoggerSetter) opens with
// the engine's, so what it logs names the engine; without one it is left
// nil, for the adapter's own default. The logger is no setting of the
// block: a block that names it is refused.
func TestAnAdapterWhoseConfigTakesALoggerOpensWithTheEnginesLogger(t *testing.T) {
	engineLog := slog.New(slog.DiscardHandler).With("instance", "e1")
	for _, c := range []struct {
		name string
		log  *slog.Logger
	}{{"WithTheEngines", engineLog}, {"WithoutOne", nil}} {
		t.Run(c.name, func(t *testing.T) {
			built, err := storage.BuildEnv([]storage.Block{block(ports.ServiceKeyValue, "logged")}, storage.Env{DataDir: ".engine", Logger: c.log})
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			opened, err := storage.Open(t.Context(), built)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = storage.Close(opened) })
			if got := <-openedWith; got != c.log {
				t.Fatalf("the adapter opened with logger %p, want %p", got, c.log)
			}
		})
	}
	b := block(ports.ServiceKeyValue, "logged")
	b.Config = node(t, "where: here\nlogger: x\n")
	if _, err := storage.Build([]storage.Block{b}, ".engine"); !errors.Is(err, domain.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "unknown key services.keyvalue.config.logger") {
		t.Fatalf("Build of a block naming the logger: err %v", err)
	}
}
