package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// DiskFull makes every row written to table from now on fail as a server
// whose disk is full fails it: a trigger raises disk_full (SQLSTATE 53100)
// before the row is stored. A disk cannot be filled for one test; the
// error, and the rollback, are the server's own. It is undone when the
// test ends.
func DiskFull(t testing.TB, dsn, table string) {
	t.Helper()
	fn := pgx.Identifier{table + "_full"}.Sanitize()
	exec := func(ctx context.Context, sql string) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	err := exec(t.Context(), `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$;
		CREATE TRIGGER full_disk BEFORE INSERT OR UPDATE ON `+pgx.Identifier{table}.Sanitize()+` FOR EACH ROW EXECUTE FUNCTION `+fn+`()`)
	if err != nil {
		t.Fatalf("make the writes to %s fail as on a full disk: %v", table, err)
	}
	t.Cleanup(func() {
		if err := exec(context.Background(), "DROP FUNCTION IF EXISTS "+fn+" CASCADE"); err != nil {
			t.Errorf("drop %s: %v", fn, err)
		}
	})
}
