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
)
