// Package pgtest gives each test tables of its own on a shared PostgreSQL
// server, so suites run in parallel, runs by several people on one server
// do not meet, and nothing is left behind.
package pgtest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/abi-engine/engine/contracttests/backendtest"
)

// Table returns a base name unique to the test and the run (prefix, a hash
// of the test's name, random digits) and drops the tables base+suffix, for
// every suffix, when the test ends. With no suffix, the table is the base
// itself.
func Table(t testing.TB, dsn, prefix string, suffixes ...string) string {
	t.Helper()
	if len(suffixes) == 0 {
		suffixes = []string{""}
	}
	return backendtest.Namespace(t, prefix, func(ctx context.Context, base string) error {
		names := make([]string, len(suffixes))
		for i, s := range suffixes {
			names[i] = pgx.Identifier{base + s}.Sanitize()
		}
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		if _, err = conn.Exec(ctx, "DROP TABLE IF EXISTS "+strings.Join(names, ", ")); err != nil {
			return err
		}
		// The stores' fence and account rows are named after their tables.
		_, err = conn.Exec(ctx, `DO $$ BEGIN
			IF to_regclass('abi_engine_fence') IS NOT NULL THEN
				DELETE FROM abi_engine_fence WHERE starts_with(scope, '`+base+`');
			END IF;
			IF to_regclass('abi_engine_account') IS NOT NULL THEN
				DELETE FROM abi_engine_account WHERE starts_with(scope, '`+base+`');
			END IF;
		END $$`)
		return err
	})
}
