package ports

// StorageConfig is implemented by every storage adapter's configuration, so
// the shared-backend check can run before anything opens.
type StorageConfig interface {
	// LocalStorage describes where the data stays when it stays on this host,
	// for example "SQLite at .engine/kv.sqlite", "files under .engine/objects"
	// or InThisProcess. It is "" when every engine reaches the data.
	LocalStorage() string
}

// InThisProcess is the LocalStorage of an adapter whose data lives in the
// process and is gone when it exits. The client commands refuse to serve
// such a service on their own: what they wrote would be gone when they
// return, and they would find nothing to read.
const InThisProcess = "this process"

// Service names, as they appear in configuration and on the wire.
const (
	ServiceKeyValue      = "keyvalue"
	ServiceDocument      = "document"
	ServiceObjectStorage = "object_storage"
	ServiceVectorStore   = "vector_store"
	ServiceCache         = "cache"
	ServiceSecret        = "secret"
)
