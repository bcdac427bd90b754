package sqlite_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/document/sqlite"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func TestDocumentContract(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		contracttests.RunDocument(t, contracttests.HarnessFunc[ports.DocumentStore](func(t *testing.T) func(*testing.T) ports.DocumentStore {
			path := filepath.Join(t.TempDir(), "data", "documents.sqlite")
			return func(t *testing.T) ports.DocumentStore {
				store, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(func() { _ = store.Close() })
				return store
			}
		}), contracttests.DocumentCapabilities{Durable: true, Fenced: true})
	})
}

func TestOpenNeedsAPath(t *testing.T) {
	if _, err := sqlite.Open(t.Context(), sqlite.Config{}); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Open without a path: err %v, want ErrInvalidArgument", err)
	}
}

func TestLocalStorageNamesTheFile(t *testing.T) {
	if got, want := (sqlite.Config{Path: ".engine/documents.sqlite"}).LocalStorage(), "SQLite at .engine/documents.sqlite"; got != want {
		t.Fatalf("LocalStorage = %q, want %q", got, want)
	}
}

// A file written before versions were kept store-wide has no versions
// table: opened, it starts the versions above the highest one left, so no
// document is given a version it, or one deleted before, had.
func TestAFileFromBeforeStoreWideVersionsGoesOnAboveIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "documents.sqlite")
	ctx := t.Context()
	store, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	var high ports.Document
	for range 3 {
		if high, err = store.Put(ctx, "c", "high", nil, ports.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	_ = store.Close()
	// What an older engine left: the documents, and no versions table.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "DROP TABLE versions"); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()

	store, err = sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	d, err := store.Put(ctx, "c", "new", nil, ports.IfVersion(0))
	if err != nil || d.Version <= high.Version {
		t.Fatalf("a new document after the upgrade = %+v, %v; want a version above %d", d, err, high.Version)
	}
}

// A file from before the counter knows nothing of the documents it
// deleted: x, deleted there at version 3 with nothing left, made again
// after the upgrade, must not be given 3 or below, which a writer still
// holding it would overwrite.
func TestAnUpgradedFileNeverGivesADeletedDocumentsVersionAgain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "documents.sqlite")
	ctx := t.Context()
	store, err := sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	_ = store.Close()
	// What an older engine left: x written three times (versions 1, 2, 3
	// as it gave them) and deleted; no versions table, no triggers.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DROP TRIGGER versions_on_insert", "DROP TRIGGER versions_on_update", "DROP TABLE versions",
		"INSERT INTO documents (collection, id, version, data) VALUES ('c', 'x', 3, '{}')", "DELETE FROM documents WHERE id = 'x'"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = db.Close()
	store, err = sqlite.Open(ctx, sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	d, err := store.Put(ctx, "c", "x", nil, ports.IfVersion(0))
	if err != nil {
		t.Fatal(err)
	}
	if d.Version <= 3 {
		t.Fatalf("x, deleted at version 3 before the upgrade, made again at version %d: a writer holding %d overwrites it", d.Version, d.Version)
	}
}
