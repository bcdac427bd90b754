package ports

import (
	"context"
	"time"
)

// KeyValue stores byte values under string keys. A key is any non-empty
// UTF-8 string of at most 1 KiB; adapters must treat "/", "..", spaces and
// unicode as plain characters.
type KeyValue interface {
	// Get returns the value, or ErrNotFound for a missing or expired key.
	Get(ctx context.Context, key string) ([]byte, error)
	// Set writes the value. ttl 0 keeps it until deleted; any other is
	// MinTTL to MaxTTL, else ErrInvalidArgument.
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	// SetIfAbsent writes the value only if the key is missing or expired, and
	// reports whether it did. Of many concurrent callers exactly one wins.
	SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error)
	// Delete removes the key and reports whether it existed.
	Delete(ctx context.Context, key string) (bool, error)
	// DeleteIfValue removes the key only if it holds value, atomically.
	DeleteIfValue(ctx context.Context, key string, value []byte) (bool, error)
	// Exists reports whether the key holds a value that has not expired.
	Exists(ctx context.Context, key string) (bool, error)
	// ListKeys returns up to limit keys with the prefix, in byte order, after
	// the cursor, and the cursor for the next page ("" on the last page).
	// The cursor is a place in that order: a key deleted since it was
	// handed out still marks where the next page starts.
	// limit <= 0 means DefaultPage; above MaxPage it is ErrInvalidArgument,
	// as is a prefix or cursor that is neither empty nor a valid key.
	ListKeys(ctx context.Context, prefix string, limit int, cursor string) ([]string, string, error)
}

// Expirer is a store that keeps expired entries until they are swept, or,
// for an object store, what writes cut short left behind. The engine's
// sweep job calls DeleteExpired on every store that has it.
type Expirer interface {
	// DeleteExpired removes the entries whose TTL has passed and says how
	// many it removed.
	DeleteExpired(ctx context.Context) (int, error)
}

// QuickGetter is a store that can answer some gets from memory, without
// waiting on a disk, a network or a lock held across either. The engine
// answers such a get where the call arrives, without handing it to a
// worker.
type QuickGetter interface {
	// QuickGet answers as Get would, when it can at once: ok true with
	// Get's value and error, or ok false to have the caller ask Get.
	QuickGet(ctx context.Context, key string) (value []byte, ok bool, err error)
}
