package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/nats-io/nats.go"

	cachekv "github.com/abi-engine/engine/adapters/secondary/cache/keyvalue"
	cachememory "github.com/abi-engine/engine/adapters/secondary/cache/memory"
	cacheobj "github.com/abi-engine/engine/adapters/secondary/cache/objectstorage"
	docjetstream "github.com/abi-engine/engine/adapters/secondary/document/jetstream"
	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	docpostgres "github.com/abi-engine/engine/adapters/secondary/document/postgres"
	docsqlite "github.com/abi-engine/engine/adapters/secondary/document/sqlite"
	kvjetstream "github.com/abi-engine/engine/adapters/secondary/keyvalue/jetstream"
	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	kvpostgres "github.com/abi-engine/engine/adapters/secondary/keyvalue/postgres"
	kvsqlite "github.com/abi-engine/engine/adapters/secondary/keyvalue/sqlite"
	objjetstream "github.com/abi-engine/engine/adapters/secondary/objectstorage/jetstream"
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

// The built-in adapters register like any other; their defaults under the
// data directory are their Configs' own (Defaulter).
func init() {
	Register(ports.ServiceVectorStore, "memory", vecmemory.Open)
	Register(ports.ServiceVectorStore, "sqlite", vecsqlite.Open)
	Register(ports.ServiceVectorStore, "qdrant", vecqdrant.Open)

	Register(ports.ServiceKeyValue, "memory", kvmemory.Open)
	Register(ports.ServiceKeyValue, "sqlite", kvsqlite.Open)
	Register(ports.ServiceKeyValue, "postgres", kvpostgres.Open)

	Register(ports.ServiceDocument, "memory", docmemory.Open)
	Register(ports.ServiceDocument, "sqlite", docsqlite.Open)
	Register(ports.ServiceDocument, "postgres", docpostgres.Open)

	Register(ports.ServiceObjectStorage, "memory", objmemory.Open)
	Register(ports.ServiceObjectStorage, "localfs", objlocalfs.Open)
	Register(ports.ServiceObjectStorage, "s3", objs3.Open)

	onNATS(ports.ServiceKeyValue, "jetstream", kvjetstream.Open)
	onNATS(ports.ServiceDocument, "jetstream", docjetstream.Open)
	onNATS(ports.ServiceObjectStorage, "jetstream", objjetstream.Open)

	Register(ports.ServiceCache, "memory", cachememory.Open)
	tier(ports.ServiceKeyValue, func(c *cachekv.Config, on ports.StorageConfig) { c.Service = on }, cachekv.Open)
	tier(ports.ServiceObjectStorage, func(c *cacheobj.Config, on ports.StorageConfig) { c.Service = on }, cacheobj.Open)

	Register(ports.ServiceSecret, "env", secretenv.Open)
	Register(ports.ServiceSecret, "dotenv", secretdotenv.Open)
}

// tier registers the cache tier named after the service it keeps its
// entries in: its declaration says where that service keeps its data, and
// it opens over the store Open opened for that service.
func tier[C ports.StorageConfig, P any, S io.Closer](service string, on func(c *C, storage ports.StorageConfig), open func(context.Context, C, P) (S, error)) {
	register(ports.ServiceCache, service, reflect.TypeFor[C](), func(b Block, env Env) (Built, error) {
		c, err := decodeConfig[C](b, env)
		if err != nil {
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
	})
}

// onNATS registers an adapter that keeps its data on the NATS servers. Its
// settings are checked when the configuration is built; its store opens on
// a connection of its own, dialed by Env.NATS, which the store closes.
func onNATS[C interface {
	ports.StorageConfig
	Check(prefix string) error
}, S io.Closer](service, name string, open func(context.Context, C, *nats.Conn) (S, error)) {
	register(service, name, reflect.TypeFor[C](), func(b Block, env Env) (Built, error) {
		c, err := decodeConfig[C](b, env) // checks c too (Checker)
		if err != nil {
			return Built{}, err
		}
		return Built{
			Declaration: storagepolicy.Declaration{Service: b.Service, Adapter: b.Adapter, Storage: c},
			Open: func(ctx context.Context, _ map[string]any) (any, func() error, error) {
				if env.NATS == nil {
					return nil, nil, fmt.Errorf("%s (%s) keeps its data on NATS, and no NATS connection was given", service, name)
				}
				nc, err := env.NATS("abi-engine " + service)
				if err != nil {
					return nil, nil, err
				}
				s, err := open(ctx, c, nc)
				if err != nil {
					return nil, nil, err
				}
				return s, s.Close, nil
			},
		}, nil
	})
}

// serviceStorage is where a service keeps its data as the shared-backend
// check judges it, so a tier on that service is judged the same.
type serviceStorage storagepolicy.Declaration

// LocalStorage implements ports.StorageConfig.
func (d serviceStorage) LocalStorage() string {
	var local *storagepolicy.Error
	if errors.As(storagepolicy.Check("tier", []storagepolicy.Declaration{storagepolicy.Declaration(d)}), &local) {
		return local.Local[0].Where
	}
	return ""
}
