package wire

// Operations of the cache service. They take and answer keyvalue's bodies:
// get KVKey → KVValue, set KVWrite → Empty, set_if_absent KVWrite → Set,
// delete KVKey → Deleted, exists KVKey → Exists.
const (
	CacheGet         = "get"
	CacheSet         = "set"
	CacheSetIfAbsent = "set_if_absent"
	CacheDelete      = "delete"
	CacheExists      = "exists"
)
