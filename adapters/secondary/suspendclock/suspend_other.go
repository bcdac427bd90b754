//go:build !linux

package suspendclock

import "time"

// suspended is 0 where no boot-time clock is read: there the holder's
// deadline is judged on Go's monotonic clock alone.
func suspended() time.Duration { return 0 }
