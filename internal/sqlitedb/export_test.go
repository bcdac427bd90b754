package sqlitedb

import (
	"log/slog"
	"time"
)

// StartCheckpointerWithFault is StartCheckpointer with a logger and a
// function run on the driver's connection before each checkpoint.
func StartCheckpointerWithFault(path string, every time.Duration, log *slog.Logger, fault func(conn any)) (*Checkpointer, error) {
	return startCheckpointer(path, every, log, fault)
}

// SetRaising makes f run raising in each raise of the fence, once it has
// committed.
func (f *Fence) SetRaising(raising func()) { f.raising = raising }

// SetClock makes the writes of d read now for the clock their waits for
// the file's lock are bounded by, from their next turn on.
func (d *DB) SetClock(now func() time.Time) { d.now = now }
