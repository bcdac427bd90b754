package pgtest

import (
	"net/url"
	"strings"
	"testing"
)

// WithParam returns dsn, a URL, with its parameter name set to value, as
// a test needs to open a pool or a session unlike the others: one
// connection (pool_max_conns), a server-side limit (statement_timeout),
// TLS (sslmode). A space in value is sent as %20: pgx reads + as itself.
func WithParam(t testing.TB, dsn, name, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}
