package sqlitedbtest

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"modernc.org/sqlite"
)

// RefuseRollbacks makes a connection of writer, the one it gives out next,
// refuse each ROLLBACK (an authorizer denies it, SQLITE_AUTH), so that a
// transaction rolled back on it stays open, as after a ROLLBACK that
// failed. The other connections of writer, and those it opens later, do
// not refuse them.
func RefuseRollbacks(t *testing.T, writer *sql.DB) {
	t.Helper()
	refuse(t, writer, "ROLLBACK")
}

// RefuseCommitsAndRollbacks makes a connection of writer, the one it gives
// out next, refuse each COMMIT and each ROLLBACK, so that a transaction
// committed on it stays open, as after a COMMIT that failed whose rollback,
// the driver's, failed too. The other connections of writer, and those it
// opens later, refuse neither.
func RefuseCommitsAndRollbacks(t *testing.T, writer *sql.DB) {
	t.Helper()
	refuse(t, writer, "COMMIT", "ROLLBACK")
}

// refuse makes the connection writer gives out next refuse the transaction
// statements verbs.
func refuse(t *testing.T, writer *sql.DB, verbs ...string) {
	t.Helper()
	conn, err := writer.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		a, ok := dc.(sqlite.AuthorizerRegisterer)
		if !ok {
			return fmt.Errorf("the driver's connection %T takes no authorizer", dc)
		}
		return a.RegisterAuthorizer(func(action sqlite.AuthorizerActionCode, arg1, _, _, _ string) sqlite.AuthorizerReturnCode {
			if action != sqlite.AuthTransaction {
				return sqlite.AuthorizerOK
			}
			for _, v := range verbs {
				if strings.EqualFold(arg1, v) {
					return sqlite.AuthorizerDeny
				}
			}
			return sqlite.AuthorizerOK
		})
	})
	if err != nil {
		t.Fatalf("make the writer's connection refuse %s: %v", strings.Join(verbs, " and "), err)
	}
}
