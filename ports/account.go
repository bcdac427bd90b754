package ports

import "context"

// AccountSource tells which NATS account the engine serves, as the broker
// knows it: the same for every engine and release of that account, and
// different for every other account on the broker.
type AccountSource func(ctx context.Context) (string, error)

type accountKey struct{}

// WithAccount returns ctx carrying the source of the serving engine's
// account, for the stores it opens under ctx. A store that engines of two
// accounts could open alike (files on this host, a table on a shared
// PostgreSQL server) records the account on first open and refuses every
// other one.
func WithAccount(ctx context.Context, source AccountSource) context.Context {
	return context.WithValue(ctx, accountKey{}, source)
}

// Account is the account source ctx carries, if any. A store opened
// without one, by a tool or a test, neither records nor checks an account.
func Account(ctx context.Context) (AccountSource, bool) {
	s, ok := ctx.Value(accountKey{}).(AccountSource)
	return s, ok && s != nil
}
