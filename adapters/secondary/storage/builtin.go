package storage

import (
	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	docpostgres "github.com/abi-engine/engine/adapters/secondary/document/postgres"
	docsqlite "github.com/abi-engine/engine/adapters/secondary/document/sqlite"
	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	kvpostgres "github.com/abi-engine/engine/adapters/secondary/keyvalue/postgres"
	kvsqlite "github.com/abi-engine/engine/adapters/secondary/keyvalue/sqlite"
	objlocalfs "github.com/abi-engine/engine/adapters/secondary/objectstorage/localfs"
	objmemory "github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	objs3 "github.com/abi-engine/engine/adapters/secondary/objectstorage/s3"
	vecmemory "github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	vecqdrant "github.com/abi-engine/engine/adapters/secondary/vectorstore/qdrant"
	vecsqlite "github.com/abi-engine/engine/adapters/secondary/vectorstore/sqlite"
	"github.com/abi-engine/engine/ports"
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
}
