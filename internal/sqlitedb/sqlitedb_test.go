package sqlitedb

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// The driver reads what follows the first "?" of its name as options, so a
// path holding one would open the file named by what comes before it, and
// the options after it (WAL, the busy timeout, immediate transactions, on
// which the stores' atomicity rests) would be read wrong or lost. Open
// refuses such a path, naming it, and touches no file.
func TestAPathWithAQuestionMarkIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data?v2", "kv.sqlite")
	db, err := Open(t.Context(), "test", path, "CREATE TABLE IF NOT EXISTS t (x)")
	if err == nil {
		_ = db.Close()
	}
	if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), path) {
		t.Errorf("Open(%q) = %v; want ErrInvalidArgument naming the path", path, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Open(%q) left %d entries in the directory, the first %q; want none", path, len(entries), entries[0].Name())
	}
}
