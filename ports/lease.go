// Package ports declares the interfaces the engine needs from the outside
// world, and what each storage adapter must say about where its data lives.
// Adapters implement them; contract suites in contracttests hold every
// adapter to the same behaviour.
package ports

import "github.com/abi-engine/engine/domain"

// Lease is the store behind the ownership lease: one key, written by create
// and by compare-and-swap on its revision. Its methods are documented on
// domain.Lease, where the ownership state machine consumes them; the contract
// is contracttests.RunLease.
type Lease = domain.Lease
