package ports

import "context"

// Secrets reads deployment secrets. They are configuration, the same for
// every engine of a deploy, so they never block a handover.
type Secrets interface {
	// Get returns the secret, or ErrNotFound; an empty name is
	// ErrInvalidArgument.
	Get(ctx context.Context, name string) (string, error)
	// List returns the names of the secrets, sorted.
	List(ctx context.Context) ([]string, error)
}
