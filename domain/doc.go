// Package domain holds what the engine is: the holder of the ownership lease,
// the roles an engine can take, the ownership state machine and the errors
// every other layer speaks in. It imports nothing internal.
package domain
