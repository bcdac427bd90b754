package ports

import (
	"context"
	"io"
	"time"
)

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key         string
	Size        int64
	ETag        string
	ContentType string
	Modified    time.Time
}

// PutObjectOptions make a Put conditional or describe the content.
type PutObjectOptions struct {
	ContentType string
	// IfAbsent fails with ErrConflict when the key exists.
	IfAbsent bool
	// IfMatch fails with ErrConflict unless the stored ETag is this one.
	IfMatch string
}

// GetObjectOptions select a byte range; the zero value reads everything.
type GetObjectOptions struct {
	Offset int64
	// Length 0 reads to the end, as does a range that runs past it,
	// however long; an Offset past the end is ErrInvalidArgument.
	Length int64
}

// ObjectStorage stores objects of any size as streams: no adapter holds a
// whole object in memory. Keys are non-empty UTF-8 of at most 1 KiB
// without NUL, and are names, never paths: "../x" stays inside the store.
type ObjectStorage interface {
	// Put stores everything r yields under key.
	Put(ctx context.Context, key string, r io.Reader, opts PutObjectOptions) (ObjectInfo, error)
	// Get opens the object (or its range) for reading; the caller closes it.
	Get(ctx context.Context, key string, opts GetObjectOptions) (io.ReadCloser, ObjectInfo, error)
	// Stat describes the object, or ErrNotFound.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Delete removes the object: ErrNotFound when missing.
	Delete(ctx context.Context, key string) error
	// List returns up to limit objects with the prefix, in key order, after
	// the cursor, and the next page's cursor ("" on the last page). limit <= 0
	// means DefaultPage; above MaxPage it is ErrInvalidArgument, as is a
	// prefix or cursor that is neither empty nor a valid key. The cursor is
	// a place in key order: an object deleted since the cursor was handed
	// out still marks where the next page starts.
	List(ctx context.Context, prefix string, limit int, cursor string) ([]ObjectInfo, string, error)
}

// ConditionalObjectDeleter is an object store that can delete an object
// only while it is the version a caller read. It is optional: a store
// without it is a whole ObjectStorage, and its users then do without (the
// cache's object_storage tier does not sweep). A store offers it only
// when the check and the removal are one step against every Put and
// Delete of the key, on any handle, as its Puts with IfMatch are: a Put
// that lands after the check is never removed.
type ConditionalObjectDeleter interface {
	// DeleteIfMatch removes key's object if its ETag is etag, comparing as
	// a Put with IfMatch does (a store whose ETag is a digest of the
	// content matches any object with that content): true when it removed
	// it; false, with no error, when the key is missing or its object has
	// another ETag. An empty etag is ErrInvalidArgument.
	DeleteIfMatch(ctx context.Context, key, etag string) (deleted bool, err error)
}
