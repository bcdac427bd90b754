package storagepolicy_test

import (
	"errors"
	"testing"

	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storagepolicy"
)

// where is a StorageConfig that says what it is told.
type where string

func (w where) LocalStorage() string { return string(w) }

func decl(service, adapter string, w where) storagepolicy.Declaration {
	return storagepolicy.Declaration{Service: service, Adapter: adapter, Storage: w}
}

func TestCheck(t *testing.T) {
	kvSQLite := decl(ports.ServiceKeyValue, "sqlite", "SQLite at ./.engine/kv.sqlite")
	kvPostgres := decl(ports.ServiceKeyValue, "postgres", "")
	objLocal := decl(ports.ServiceObjectStorage, "localfs", "files under ./.engine/objects")
	objS3 := decl(ports.ServiceObjectStorage, "s3", "")
	docMemory := decl(ports.ServiceDocument, "memory", "this process")
	vecQdrant := decl(ports.ServiceVectorStore, "qdrant", "")
	off := func(d storagepolicy.Declaration) storagepolicy.Declaration {
		d.Off = true
		return d
	}
	cases := []struct {
		name     string
		rollout  string
		services []storagepolicy.Declaration
		want     string // "" means the check passes
	}{
		{"NoRolloutIDAllowsLocalBackends", "", []storagepolicy.Declaration{kvSQLite, objLocal, docMemory}, ""},
		{"SharedBackendsPass", "r7", []storagepolicy.Declaration{kvPostgres, objS3, vecQdrant}, ""},
		{"NoServicesPass", "r7", nil, ""},
		{"OneLocalService", "r7", []storagepolicy.Declaration{kvSQLite, objS3},
			`rollout "r7" needs shared backends, but keyvalue keeps its data in SQLite at ./.engine/kv.sqlite`},
		{"TwoLocalServices", "r7", []storagepolicy.Declaration{kvSQLite, objLocal},
			`rollout "r7" needs shared backends, but keyvalue keeps its data in SQLite at ./.engine/kv.sqlite and object_storage in files under ./.engine/objects`},
		{"ThreeLocalServicesInServiceOrder", "v1.4.0", []storagepolicy.Declaration{objLocal, docMemory, kvSQLite},
			`rollout "v1.4.0" needs shared backends, but keyvalue keeps its data in SQLite at ./.engine/kv.sqlite, document in this process and object_storage in files under ./.engine/objects`},
		{"SwitchedOffServicesAreIgnored", "r7", []storagepolicy.Declaration{off(kvSQLite), objS3, off(docMemory)}, ""},
		{"SwitchedOffAmongLocal", "r7", []storagepolicy.Declaration{off(kvSQLite), objLocal},
			`rollout "r7" needs shared backends, but object_storage keeps its data in files under ./.engine/objects`},
		{"SecretsAlwaysPass", "r7", []storagepolicy.Declaration{
			decl(ports.ServiceSecret, "dotenv", "the file ./.env"), decl(ports.ServiceSecret, "env", "this process")}, ""},
		{"CacheTierOnASharedServicePasses", "r7", []storagepolicy.Declaration{kvPostgres, decl(ports.ServiceCache, "keyvalue", "")}, ""},
		{"CacheTierOnALocalServiceFails", "r7", []storagepolicy.Declaration{
			kvPostgres, objLocal, decl(ports.ServiceCache, "object_storage", "the object_storage service: files under ./.engine/objects")},
			`rollout "r7" needs shared backends, but object_storage keeps its data in files under ./.engine/objects and cache in the object_storage service: files under ./.engine/objects`},
		{"MemoryCacheFails", "r7", []storagepolicy.Declaration{kvPostgres, decl(ports.ServiceCache, "memory", "this process")},
			`rollout "r7" needs shared backends, but cache keeps its data in this process`},
		{"AnAdapterRegisteredElsewhereIsJudgedByItsOwnAnswer", "r7", []storagepolicy.Declaration{
			decl(ports.ServiceKeyValue, "redis", ""), decl(ports.ServiceDocument, "bolt", "BoltDB at ./x.db")},
			`rollout "r7" needs shared backends, but document keeps its data in BoltDB at ./x.db`},
		{"AnAdapterThatSaysNothingFails", "r7", []storagepolicy.Declaration{{Service: ports.ServiceVectorStore, Adapter: "mystery"}},
			`rollout "r7" needs shared backends, but vector_store keeps its data in the adapter "mystery", which does not say where its data lives`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := storagepolicy.Check(c.rollout, c.services)
			if c.want == "" {
				if err != nil {
					t.Fatalf("Check: %v, want no error", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check passed, want %s", c.want)
			}
			if !errors.Is(err, storagepolicy.ErrLocalBackends) {
				t.Fatalf("Check: %v does not match ErrLocalBackends", err)
			}
			if err.Error() != c.want {
				t.Fatalf("Check:\n got %s\nwant %s", err, c.want)
			}
			var e *storagepolicy.Error
			if !errors.As(err, &e) || e.RolloutID != c.rollout || len(e.Local) == 0 {
				t.Fatalf("Check: %#v, want an *Error for rollout %q", err, c.rollout)
			}
		})
	}
}

func TestCheckDoesNotReorderItsInput(t *testing.T) {
	in := []storagepolicy.Declaration{
		decl(ports.ServiceObjectStorage, "localfs", "files under x"),
		decl(ports.ServiceKeyValue, "sqlite", "SQLite at y"),
	}
	if err := storagepolicy.Check("r1", in); err == nil {
		t.Fatalf("Check passed local backends")
	}
	if in[0].Service != ports.ServiceObjectStorage {
		t.Fatalf("Check reordered the caller's slice")
	}
}
