// Package expiry holds what the sweeps of expired entries share: how much
// one hold of a store's lock may remove, so that calls go on during a
// sweep.
package expiry

// Batch is how many entries a sweep looks at under one hold of the lock:
// calls go on between batches.
const Batch = 256
