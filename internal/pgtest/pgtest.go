// Package pgtest gives each test tables of its own on a shared PostgreSQL
// server, so suites run in parallel and leave nothing behind.
package pgtest

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Table returns a base name derived from the test (prefix, then a hash of
// the test's name) and drops the tables base+suffix, for every suffix, both
// now (a run that died may have left them) and when the test ends. With no
// suffix, the table is the base itself.
func Table(t testing.TB, dsn, prefix string, suffixes ...string) string {
	t.Helper()
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	base := fmt.Sprintf("%s_%016x", prefix, h.Sum64())
	if len(suffixes) == 0 {
		suffixes = []string{""}
	}
	names := make([]string, len(suffixes))
	for i, s := range suffixes {
		names[i] = pgx.Identifier{base + s}.Sanitize()
	}
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP TABLE IF EXISTS "+strings.Join(names, ", "))
		return err
	}
	if err := drop(); err != nil {
		t.Fatalf("drop tables %s: %v", base, err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("drop tables %s: %v", base, err)
		}
	})
	return base
}
