package ports

import "time"

// The bounds of the input every adapter of a port accepts. They are part
// of the contract: an adapter refuses input past them with
// ErrInvalidArgument naming the field and the bound, so a deploy that
// moves from one adapter to another meets no new refusals, and one caller
// cannot make a single call do unbounded work.
const (
	// DefaultPage is the page size of a listing (ListKeys, Find, List)
	// given a limit of 0 or less.
	DefaultPage = 100
	// MaxPage is the largest page a listing returns; a larger limit is
	// refused, not clamped, so a caller learns of it at once rather than
	// from a short page.
	MaxPage = 1000

	// MaxDepth is how deeply arrays and objects may nest in a document, a
	// query value or a vector payload; the value itself is level 1. Stores
	// that read JSON themselves stop far deeper (SQLite at 1000 levels),
	// and a stored document they cannot read would break every query on
	// its collection, so every adapter checks it before a write.
	MaxDepth = 100

	// MaxWhere is the most fields a document query's where names (Find
	// and Count). Each is one more condition in the backend's query, and
	// the backends stop far apart: SQLite refuses a query of about 300
	// (its expression tree is 1000 deep at most), PostgreSQL takes 65,535
	// parameters, two a field, and plans 20,000 fields for half a minute
	// on an empty table, holding a pooled connection all along.
	MaxWhere = 100

	// MaxContentType is the longest content type an object is stored
	// with. A content type is printable ASCII: S3 sends it as an HTTP
	// header, which cannot carry a line break, and its servers refuse
	// long ones (versitygw at some kilobytes).
	MaxContentType = 1024

	// MaxDimension is the largest dimension of a vector collection: the
	// largest embedding models in use have a few thousand.
	MaxDimension = 8192
	// MaxK is the most vectors one search returns. At MaxK and
	// MaxDimension a search's answer stays well under the largest reply
	// the engine parks (256 MiB).
	MaxK = MaxPage
)

// TTL bounds. A TTL is kept to the millisecond, so a positive one below
// MinTTL would round to zero, which means "never expires": it is refused
// rather than kept forever. MaxTTL keeps expiry times far from the edge of
// every backend's timestamps; a value meant to live longer has no TTL.
const (
	MinTTL = time.Millisecond
	MaxTTL = 10 * 365 * 24 * time.Hour
)
