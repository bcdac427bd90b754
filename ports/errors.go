package ports

import "errors"

// Errors every storage adapter speaks. Adapters translate their backend's
// errors into these at the boundary and wrap them with what failed and with
// which value; callers check them with errors.Is.
var (
	// ErrNotFound: the key, document, object or collection does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a conditional write lost (a version, value or etag did not
	// match), or a collection exists with other settings.
	ErrConflict = errors.New("conflict")
	// ErrInvalidArgument: the input is malformed; the message names the field.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrTooLarge: the input is larger than the adapter or service accepts.
	ErrTooLarge = errors.New("too large")
	// ErrStorageFull: the backend has no room for the write (a limit of
	// the store's, or its disk) and wrote nothing; it may take the write
	// once room is made.
	ErrStorageFull = errors.New("storage full")
	// ErrNotDone: the backend did not do the write and changed nothing,
	// which the adapter knows for certain (the service refused every
	// sending of it, or none reached a store that could take it, or an
	// upload of it was dropped before it published anything); it may take
	// the write if it is sent again later. An adapter that cannot tell
	// whether a failed write was done never says this.
	ErrNotDone = errors.New("not done, may be sent again")
)
