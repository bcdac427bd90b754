// Package expiry sweeps the expired entries of a map in memory without
// holding up the calls on it.
package expiry

import (
	"context"
	"sync"
	"time"
)

// Batch is how many entries a sweep looks at under one hold of the lock:
// calls go on between batches.
const Batch = 256

// Sweep removes the expired entries of the map entries returns, which mu
// guards; expired is told the key too, for what the caller keeps beside
// the map. A walk of the whole map under the lock would hold up every call
// for as long as the map is large (a third of a second at a million
// entries), so it looks at a batch at a time, each from a place Go picks at
// random, and stops once a batch finds few expired entries, as Redis's
// expiry cycle does. Expired entries left are at most about a third as
// many as the live ones, until a later sweep or a call meets them.
func Sweep[E any](ctx context.Context, mu sync.Locker, entries func() map[string]E, expired func(key string, e E, now time.Time) bool) (int, error) {
	deleted := 0
	for {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		n, looked := batch(mu, entries, expired)
		deleted += n
		if looked < Batch || n*4 < looked {
			return deleted, nil
		}
	}
}

// batch removes the expired entries among up to Batch of them.
func batch[E any](mu sync.Locker, entries func() map[string]E, expired func(string, E, time.Time) bool) (deleted, looked int) {
	mu.Lock()
	defer mu.Unlock()
	m, now := entries(), time.Now()
	for key, e := range m {
		if looked == Batch {
			break
		}
		looked++
		if expired(key, e, now) {
			delete(m, key)
			deleted++
		}
	}
	return deleted, looked
}
