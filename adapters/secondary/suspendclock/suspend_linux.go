package suspendclock

import (
	"time"

	"golang.org/x/sys/unix"
)

// suspended is CLOCK_BOOTTIME less CLOCK_MONOTONIC: both count from boot,
// and only the first goes on during a suspend.
func suspended() time.Duration {
	var boot, mono unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) != nil || unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono) != nil {
		return 0
	}
	return time.Duration(boot.Nano() - mono.Nano())
}
