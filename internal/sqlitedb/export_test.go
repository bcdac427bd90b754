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

// SetSetting makes setting run before each change of a connection's busy
// timeout after a raise, failing it with the error setting returns.
func (f *Fence) SetSetting(setting func(ms int64) error) { f.setting = setting }
