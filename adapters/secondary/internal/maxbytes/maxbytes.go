// Package maxbytes is the max_bytes setting of the stores that keep their
// data in the engine's memory: the cache, and the keyvalue, document and
// vector stores of the memory adapter. Each has a default of its own.
package maxbytes

import (
	"fmt"

	"github.com/abi-engine/engine/ports"
)

// Default is the bound a block sets, or def when it leaves it out (0).
func Default(set, def int64) int64 {
	if set == 0 {
		return def
	}
	return set
}

// Check refuses a negative bound, naming it under key.
func Check(key string, set, def int64) error {
	if set < 0 {
		return fmt.Errorf("%s.max_bytes is %d: it is a number of bytes, 0 for the default of %d: %w", key, set, def, ports.ErrInvalidArgument)
	}
	return nil
}
