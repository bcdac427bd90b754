package pgdb_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/abi-engine/engine/internal/pgdb"
	"github.com/abi-engine/engine/ports"
)

// Only a write that certainly did not happen, for a cause that passes, is
// not done: an error that ends the session (FATAL) may come after a commit,
// a refusal such as a unique violation would meet the write again, and a
// context that ended while the write was in flight leaves it unknown. The
// faults themselves are caused on the server in the stores' tests; a FATAL
// deadlock cannot be, so the errors are made here.
func TestOnlyAWriteThatCertainlyDidNotHappenIsNotDone(t *testing.T) {
	server := func(severity, code string) error {
		return fmt.Errorf("set: %w", &pgconn.PgError{Severity: severity, SeverityUnlocalized: severity, Code: code})
	}
	for name, c := range map[string]struct {
		err     error
		notDone bool
	}{
		"a deadlock":                    {server("ERROR", "40P01"), true},
		"a serialization failure":       {server("ERROR", "40001"), true},
		"a lock waited for too long":    {server("ERROR", "55P03"), true},
		"a statement cancelled":         {server("ERROR", "57014"), true},
		"a deadlock that ends the link": {server("FATAL", "40P01"), false},
		"a unique violation":            {server("ERROR", "23505"), false},
		"a context ended in flight":     {context.Canceled, false},
		"no error":                      {nil, false},
	} {
		got := pgdb.NotDone(c.err)
		if errors.Is(got, ports.ErrNotDone) != c.notDone {
			t.Errorf("%s: %v, want not done %v", name, got, c.notDone)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%s: %v no longer says %v", name, got, c.err)
		}
	}
	once := pgdb.NotDone(server("ERROR", "40P01"))
	if twice := pgdb.NotDone(once); twice != once {
		t.Errorf("a write already not done is marked again: %v", twice)
	}
}
