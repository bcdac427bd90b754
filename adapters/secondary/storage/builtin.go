package storage

import (
	"context"
	"errors"
	"fmt"

	cachekv "github.com/abi-engine/engine/adapters/secondary/cache/keyvalue"
	cachememory "github.com/abi-engine/engine/adapters/secondary/cache/memory"
	cacheobj "github.com/abi-engine/engine/adapters/secondary/cache/objectstorage"
	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	docpostgres "github.com/abi-engine/engine/adapters/secondary/document/postgres"
	docsqlite "github.com/abi-engine/engine/adapters/secondary/document/sqlite"
	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	kvpostgres "github.com/abi-engine/engine/adapters/secondary/keyvalue/postgres"
	kvsqlite "github.com/abi-engine/engine/adapters/secondary/keyvalue/sqlite"
	objlocalfs "github.com/abi-engine/engine/adapters/secondary/objectstorage/localfs"
	objmemory "github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	objs3 "github.com/abi-engine/engine/adapters/secondary/objectstorage/s3"
	secretdotenv "github.com/abi-engine/engine/adapters/secondary/secret/dotenv"
	secretenv "github.com/abi-engine/engine/adapters/secondary/secret/env"
	vecmemory "github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	vecqdrant "github.com/abi-engine/engine/adapters/secondary/vectorstore/qdrant"
	vecsqlite "github.com/abi-engine/engine/adapters/secondary/vectorstore/sqlite"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storagepolicy"
)

// The built-in adapters and their local defaults under the data directory.
func init() {
	register(ports.ServiceVectorStore, "memory", adapter[vecmemory.Config](nil, vecmemory.Open))
	register(ports.ServiceVectorStore, "sqlite", adapter(func(c *vecsqlite.Config, dir string) {
		defaultPath(&c.Path, dir, "vectors.sqlite")
	}, vecsqlite.Open))
	register(ports.ServiceVectorStore, "qdrant", adapter[vecqdrant.Config](nil, vecqdrant.Open))

	register(ports.ServiceKeyValue, "memory", adapter[kvmemory.Config](nil, kvmemory.Open))
	register(ports.ServiceKeyValue, "sqlite", adapter(func(c *kvsqlite.Config, dir string) {
		defaultPath(&c.Path, dir, "kv.sqlite")
	}, kvsqlite.Open))
	register(ports.ServiceKeyValue, "postgres", adapter[kvpostgres.Config](nil, kvpostgres.Open))

	register(ports.ServiceDocument, "memory", adapter[docmemory.Config](nil, docmemory.Open))
	register(ports.ServiceDocument, "sqlite", adapter(func(c *docsqlite.Config, dir string) {
		defaultPath(&c.Path, dir, "documents.sqlite")
	}, docsqlite.Open))
	register(ports.ServiceDocument, "postgres", adapter[docpostgres.Config](nil, docpostgres.Open))

	register(ports.ServiceObjectStorage, "memory", adapter[objmemory.Config](nil, objmemory.Open))
	register(ports.ServiceObjectStorage, "localfs", adapter(func(c *objlocalfs.Config, dir string) {
		defaultPath(&c.Path, dir, "objects")
	}, objlocalfs.Open))
	register(ports.ServiceObjectStorage, "s3", adapter[objs3.Config](nil, objs3.Open))

	register(ports.ServiceCache, "memory", adapter[cachememory.Config](nil, cachememory.Open))
	register(ports.ServiceCache, ports.ServiceKeyValue, tier(ports.ServiceKeyValue,
		func(c *cachekv.Config, on ports.StorageConfig) { c.Service = on }, cachekv.Open))
	register(ports.ServiceCache, ports.ServiceObjectStorage, tier(ports.ServiceObjectStorage,
		func(c *cacheobj.Config, on ports.StorageConfig) { c.Service = on }, cacheobj.Open))

	register(ports.ServiceSecret, "env", adapter[secretenv.Config](nil, secretenv.Open))
	register(ports.ServiceSecret, "dotenv", adapter[secretdotenv.Config](nil, secretdotenv.Open))
}

// tier makes the factory of a cache tier that keeps its entries in another
// service: its declaration says where that service keeps its data, and it
// opens over the store Open opened for that service.
func tier[C ports.StorageConfig, P any, S interface{ Close() error }](service string, on func(c *C, storage ports.StorageConfig), open func(context.Context, C, P) (S, error)) Factory {
	return func(b Block, env Env) (Built, error) {
		var c C
		if err := Decode(b.Config, &c, b.Key+".config"); err != nil {
			return Built{}, err
		}
		dep, ok := env.Built[service]
		if !ok || dep.Declaration.Off {
			return Built{}, configError(b.Key+".adapter", fmt.Errorf("the %s tier needs services.%s, which is off", service, service))
		}
		on(&c, serviceStorage(dep.Declaration))
		return Built{
			Declaration: storagepolicy.Declaration{Service: b.Service, Adapter: b.Adapter, Storage: c},
			Open: func(ctx context.Context, deps map[string]any) (any, func() error, error) {
				store, ok := deps[service].(P)
				if !ok {
					return nil, nil, fmt.Errorf("the %s tier: services.%s is not open", service, service)
				}
				s, err := open(ctx, c, store)
				if err != nil {
					return nil, nil, err
				}
				return s, s.Close, nil
			},
		}, nil
	}
}

// serviceStorage is where a service keeps its data as the shared-backend
// check judges it, custom adapters and their shared_storage included, so a
// tier on that service is judged the same.
type serviceStorage storagepolicy.Declaration

// LocalStorage implements ports.StorageConfig.
func (d serviceStorage) LocalStorage() string {
	var local *storagepolicy.Error
	if errors.As(storagepolicy.Check("tier", []storagepolicy.Declaration{storagepolicy.Declaration(d)}), &local) {
		return local.Local[0].Where
	}
	return ""
}
