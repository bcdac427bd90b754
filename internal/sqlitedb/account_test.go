package sqlitedb_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/abi-engine/engine/internal/sqlitedb"
	"github.com/abi-engine/engine/ports"
)

const accountTestSchema = "CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY)"

func underAccount(account string) context.Context {
	return ports.WithAccount(context.Background(), func(context.Context) (string, error) { return account, nil })
}

func openAs(ctx context.Context, path string) error {
	db, err := sqlitedb.Open(ctx, "test sqlite", path, accountTestSchema)
	if err != nil {
		return err
	}
	return db.Close()
}

// A file keeps the account of the first serving engine that opens it, as
// a file made before files kept one adopts it then: engines of that
// account open it again, an engine of another account is refused with
// both accounts and the file named, and a tool, which opens with no
// account, is neither checked nor makes the file its own.
func TestAFileBelongsToTheFirstAccountThatOpensIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "kv.sqlite")
	if err := openAs(context.Background(), path); err != nil {
		t.Fatalf("a tool's open: %v", err)
	}
	if err := openAs(underAccount("TEAM_A"), path); err != nil {
		t.Fatalf("the first account's open of a file a tool made: %v", err)
	}
	if err := openAs(underAccount("TEAM_A"), path); err != nil {
		t.Fatalf("the same account's open again: %v", err)
	}
	err := openAs(underAccount("TEAM_B"), path)
	if !errors.Is(err, sqlitedb.ErrOtherAccount) {
		t.Fatalf("another account's open: %v, want ErrOtherAccount", err)
	}
	for _, want := range []string{`"TEAM_A"`, `"TEAM_B"`, path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %s", err, want)
		}
	}
	if err := openAs(context.Background(), path); err != nil {
		t.Fatalf("a tool's open of a file that belongs to an account: %v", err)
	}
	if err := openAs(underAccount("TEAM_A"), path); err != nil {
		t.Fatalf("the first account's open after the refusal: %v", err)
	}
}

// An engine that cannot learn its account opens no file: it cannot tell
// whether the file is another account's.
func TestAnUnknownAccountOpensNoFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.sqlite")
	unknown := errors.New("no answer")
	ctx := ports.WithAccount(context.Background(), func(context.Context) (string, error) { return "", unknown })
	if err := openAs(ctx, path); !errors.Is(err, unknown) {
		t.Fatalf("open with an unknown account: %v, want the reason", err)
	}
}
