package redact_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/abi-engine/engine/internal/redact"
)

func TestURLs(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"UserPassword", "nats://engine:s3cret@nats-1:4222", "nats://engine:***@nats-1:4222"},
		{"Token", "nats://T0KEN@nats-1:4222", "nats://***@nats-1:4222"},
		{"List", "nats://a:pw1@n1:4222, nats://T0KEN@n2:4222,nats://n3:4222",
			"nats://a:***@n1:4222, nats://***@n2:4222,nats://n3:4222"},
		{"TLS", "tls://engine:s3cret@nats:4222", "tls://engine:***@nats:4222"},
		{"WebSocket", "ws://engine:s3cret@nats:8080/ws", "ws://engine:***@nats:8080/ws"},
		{"SecureWebSocket", "wss://T0KEN@nats:443", "wss://***@nats:443"},
		{"PasswordWithAt", "nats://u:p@ss@host:4222", "nats://u:***@host:4222"},
		{"PasswordWithSlash", "nats://u:pa/ss@host:4222", "nats://u:***@host:4222"},
		{"EmptyPassword", "nats://u:@host:4222", "nats://u:***@host:4222"},
		{"NoCredentials", "nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"InError", `connect to NATS at "nats://u:s3cret@h:4222": refused`, `connect to NATS at "nats://u:***@h:4222": refused`},
		{"Postgres", "postgres://kv:pgpw@db:5432/engine?sslmode=disable", "postgres://kv:***@db:5432/engine?sslmode=disable"},
		{"AtInPathOnly", "nats://host:4222/x@y", "nats://host:***@y"},
		{"PasswordWithParen", "nats://engine:pa(ss@nats-1:4222", "nats://engine:***@nats-1:4222"},
		{"PasswordWithSemicolon", "nats://engine:pa;ss@nats-1:4222", "nats://engine:***@nats-1:4222"},
		{"PasswordWithQuote", "postgres://kv:s3cr'et@db:5432/engine", "postgres://kv:***@db:5432/engine"},
		{"PasswordWithParenInError", `dial "nats://u:p)w@h:4222": refused`, `dial "nats://u:***@h:4222": refused`},
		{"NoURL", "user@example.com", "user@example.com"},
		{"Empty", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := redact.URLs(c.in); got != c.want {
				t.Fatalf("URLs(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

func FuzzURLs(f *testing.F) {
	for _, s := range []string{"nats://u:pw@h:4222", "nats://tok@h,tls://u:p@h2", "ws://a@b@c/d", "x://@", "://:@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := redact.URLs(s)
		if strings.Count(out, "://") != strings.Count(s, "://") {
			t.Fatalf("URLs(%q) = %q changed the number of URLs", s, out)
		}
		if again := redact.URLs(out); again != out {
			t.Fatalf("URLs is not stable: %q, then %q", out, again)
		}
		// A URL that nats.go or pgx would read a password from shows none.
		if u, err := url.Parse(s); err == nil && u.User != nil && u.Scheme != "" && strings.Count(s, "://") == 1 {
			secret, ok := u.User.Password()
			if !ok {
				secret = u.User.Username() // a lone user is a token
			}
			if len(secret) > 2 && strings.Contains(out, secret) && !strings.Contains(u.Host+u.Path+u.Scheme+u.User.Username(), secret) {
				t.Fatalf("URLs(%q) = %q shows %q", s, out, secret)
			}
		}
	})
}

// URL hides the credentials of a configured URL that is malformed, which
// URLs, looking for "://", would pass over.
func TestURLOfAMalformedValue(t *testing.T) {
	for in, want := range map[string]string{
		"nats:engine:hunter2@nats-1":  "***@nats-1",
		"nats:/engine:hunter2@nats-1": "***@nats-1",
		"nats//engine:hunter2@nats-1": "***@nats-1",
		"nats://engine:hunter2@n:1":   "nats://engine:***@n:1",
		"nats://engine:hun ter2@n:1":  "nats://engine:***@n:1",
		`nats://engine:hun"ter2@n:1`:  "nats://engine:***@n:1",
		"nats://engine:hun<ter>@n:1":  "nats://engine:***@n:1",
		"nats://hun ter2@n:1":         "nats://***@n:1",
		"nats-1:4222":                 "nats-1:4222",
	} {
		if got := redact.URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
}
