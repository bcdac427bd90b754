package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
)

func TestCallerSecretCannotBeSilentlyOff(t *testing.T) {
	cases := []struct {
		name, src string
		getenv    func(string) string
		// want are the parts of the error; none when the file is valid.
		want []string
	}{
		{name: "KeyLeftOut", src: "nats: {url: \"nats://h:4222\"}\n", getenv: env()},
		{name: "VariableUnset", src: "nats:\n  caller_secret: ${ENGINE_CALLER_SECRET}\nhttp: {token: tok}\n", getenv: env(),
			want: []string{"engine.yaml line 2", "nats.caller_secret", "ENGINE_CALLER_SECRET", "empty or unset", "leave the key out"}},
		{name: "VariableQuotedAndEmpty", src: "nats:\n  caller_secret: \"${S}\"\nhttp: {token: tok}\n", getenv: env("S", ""),
			want: []string{"line 2", "nats.caller_secret (from S)", "empty or unset"}},
		{name: "LiteralEmpty", src: "nats:\n  caller_secret: \"\"\nhttp: {token: tok}\n", getenv: env(),
			want: []string{"line 2", "nats.caller_secret", "is empty", "leave the key out"}},
		{name: "NullValue", src: "nats:\n  caller_secret:\nhttp: {token: tok}\n", getenv: env(),
			want: []string{"line 2", "nats.caller_secret", "is empty"}},
		{name: "TooShort", src: "nats:\n  caller_secret: ${S}\nhttp: {token: tok}\n", getenv: env("S", callerSecret[:31]),
			want: []string{"line 2", "nats.caller_secret", "is 31 bytes, want at least 32"}},
		{name: "LongEnough", src: "nats:\n  caller_secret: ${S}\nhttp: {token: tok}\n", getenv: env("S", callerSecret)},
		{name: "HTTPUnguarded", src: "nats:\n  caller_secret: ${S}\n", getenv: env("S", callerSecret),
			want: []string{"http.token", "is empty while nats.caller_secret is set", "127.0.0.1:8080", "unsigned", "http.listen to off"}},
		{name: "HTTPOff", src: "nats:\n  caller_secret: ${S}\nhttp: {listen: off}\n", getenv: env("S", callerSecret)},
		{name: "HTTPTokenVariableUnset", src: "http: {token: \"${ABI_HTTP_TOKEN}\"}\n", getenv: env(),
			want: []string{"line 1", "http.token (from ABI_HTTP_TOKEN)", "empty or unset"}},
		{name: "HTTPTokenLiteralEmpty", src: "http: {token: \"\"}\n", getenv: env()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse("engine.yaml", []byte(c.src), c.getenv)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, domain.ErrInvalidConfig) {
				t.Fatalf("Parse = %v, want a configuration error", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), callerSecret[:31]) {
				t.Errorf("error %q shows the secret", err)
			}
		})
	}
}

// credentialURLs are the URL forms that carry NATS credentials, each with
// the secret it must not show.
var credentialURLs = []struct{ name, url, secret string }{
	{"UserPassword", "nats://engine:natspw@nats-1:4222", "natspw"},
	{"Token", "nats://T0KENs3cret@nats-1:4222", "T0KENs3cret"},
	{"SeveralURLs", "nats://a:listpw1@n1:4222,nats://listtok2@n2:4222", "listpw1,listtok2"},
	{"TLS", "tls://engine:tlspw@nats-1:4222", "tlspw"},
	{"WebSocket", "ws://engine:wspw@nats-1:8080", "wspw"},
	{"SecureWebSocket", "wss://wsstoken@nats-1:443", "wsstoken"},
}

func TestURLCredentialsAreMaskedInTheRenderingAndInErrors(t *testing.T) {
	for _, u := range credentialURLs {
		t.Run(u.name, func(t *testing.T) {
			c := parse(t, "nats: {url: \""+u.url+"\"}\n", env())
			out, err := c.Masked().YAML()
			if err != nil {
				t.Fatal(err)
			}
			bad := "nats: {url: \"" + strings.Replace(u.url, "://", "x://", 1) + "\"}\n"
			_, perr := config.Parse("engine.yaml", []byte(bad), env())
			if perr == nil {
				t.Fatalf("a URL of an unknown scheme loads: %s", bad)
			}
			fromEnv := strings.ReplaceAll(u.url, ",", "/%zz,") + "/%zz"
			_, eerr := config.Parse("engine.yaml", nil, env(config.EnvNATSURL, fromEnv))
			if eerr == nil {
				t.Fatalf("an unparsable URL from %s loads", config.EnvNATSURL)
			}
			for _, s := range strings.Split(u.secret, ",") {
				for where, text := range map[string]string{"rendering": string(out), "scheme error": perr.Error(), "parse error": eerr.Error()} {
					if strings.Contains(text, s) {
						t.Errorf("the %s shows %q: %s", where, s, text)
					}
					if !strings.Contains(text, "***") {
						t.Errorf("the %s masks nothing: %s", where, text)
					}
				}
			}
		})
	}
}

func TestGuardsSayWhoIsChecked(t *testing.T) {
	open := strings.Join(parse(t, "http: {hosts: [engine.internal]}\n", env()).Guards(), "\n")
	for _, want := range []string{"NATS callers: NOT checked", "HTTP API on 127.0.0.1:8080: no token", "engine.internal"} {
		if !strings.Contains(open, want) {
			t.Errorf("guards of an open engine lack %q:\n%s", want, open)
		}
	}
	closed := strings.Join(parse(t, "nats: {caller_secret: "+callerSecret+"}\nhttp: {listen: \"off\"}\n", env()).Guards(), "\n")
	if !strings.Contains(closed, "signed with nats.caller_secret") || !strings.Contains(closed, "HTTP API: off") || strings.Contains(closed, callerSecret) {
		t.Errorf("guards of a closed engine:\n%s", closed)
	}
}

func TestInboxPrefix(t *testing.T) {
	if c := parse(t, "nats: {inbox_prefix: _INBOX.caller_a}\n", env()); c.NATS.InboxPrefix != "_INBOX.caller_a" {
		t.Fatalf("inbox_prefix reads %q", c.NATS.InboxPrefix)
	}
	for _, bad := range []string{"_INBOX.>", "_INBOX.*.x", "_INBOX.", ".x", "a..b", "a b", "replies.caller_a", "_INBOXES.a"} {
		_, err := config.Parse("engine.yaml", []byte("nats: {inbox_prefix: \""+bad+"\"}\n"), env())
		if err == nil || !strings.Contains(err.Error(), "nats.inbox_prefix") {
			t.Errorf("inbox_prefix %q: %v, want an error naming the key", bad, err)
		}
	}
}

// A nats.url refused as malformed is quoted in the error without the
// password it carries, also when it has no "://" to read a URL by.
func TestABadNATSURLIsQuotedWithoutItsPassword(t *testing.T) {
	for _, url := range []string{"nats:engine:hunter2@nats-1", "nats:/engine:hunter2@nats-1", "nats//engine:hunter2@nats-1", "nats://engine:hunter2@nats-1:4222x"} {
		_, err := config.Parse("engine.yaml", []byte("nats: {url: \""+url+"\"}\n"), env())
		if err == nil {
			t.Errorf("%q accepted", url)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error shows the password: %v", url, err)
		}
	}
}

// A password typed into nats.url as it is, with a character a URL does not
// take there (a space, a quote, an angle bracket, a backtick), makes the
// URL malformed; the error quotes the URL without it, as it does any
// other password, and a token the same.
func TestANATSURLWhosePasswordAURLDoesNotTakeIsQuotedWithoutIt(t *testing.T) {
	for _, secret := range []string{"hunter 2", `hunter"2`, "hunter<2>", "hunter`2", `hunter\2`} {
		for _, url := range []string{"nats://engine:" + secret + "@nats-1:4222", "nats://" + secret + "@nats-1:4222", "nats://nats-0:4222,nats://engine:" + secret + "@nats-1:4222"} {
			_, err := config.Parse("engine.yaml", []byte("nats: {url: \"${NATS_URL_IN_FILE}\"}\n"), env("NATS_URL_IN_FILE", url))
			if err == nil {
				t.Errorf("%q accepted", url)
			} else if strings.Contains(err.Error(), "hunter") {
				t.Errorf("%q: the error shows the password: %v", url, err)
			} else if !strings.Contains(err.Error(), "***@nats-1:4222") {
				t.Errorf("%q: the error does not name the server: %v", url, err)
			}
		}
	}
}

// nats.url is a list split at its commas, as nats.go splits it, so a
// password typed with a comma is cut in two: the piece before the comma
// ends in the password's start and has no "@", and it is malformed (its
// port is no number). The error quotes it without that start.
func TestANATSURLWhosePasswordHoldsACommaIsQuotedWithoutIt(t *testing.T) {
	for _, url := range []string{
		"nats://engine:hunter,2@nats-1:4222",
		"nats://engine:hunter,two,three@nats-1:4222",
		"nats://nats-0:4222,nats://engine:hunter,2@nats-1:4222",
	} {
		_, err := config.Parse("engine.yaml", []byte("nats: {url: \"${NATS_URL_IN_FILE}\"}\n"), env("NATS_URL_IN_FILE", url))
		if err == nil {
			t.Errorf("%q accepted", url)
		} else if strings.Contains(err.Error(), "hunter") {
			t.Errorf("%q: the error shows the password: %v", url, err)
		}
	}
}

// The NATS credentials come from the environment, as the README shows
// (password: "${NATS_PASSWORD}"). A variable that is unset or empty there
// would make the engine present an empty password, or, for a token, a
// creds file or an nkey seed, no credentials at all: the server then
// refuses a password that is not wrong but missing, or takes the engine
// as whoever an anonymous client is. It is a configuration error naming
// the key and the variable, as for the caller secret; leaving the key out
// is how to run without.
func TestANATSCredentialFromAnEmptyVariableIsRefused(t *testing.T) {
	for _, c := range []struct{ key, src string }{
		{"nats.credentials.password", "nats:\n  credentials: {user: engine_a, password: \"${NATS_PASSWORD}\"}\n"},
		{"nats.credentials.password", "nats:\n  credentials:\n    user: engine_a\n    password: ${NATS_PASSWORD}\n"},
		{"nats.credentials.token", "nats:\n  credentials: {token: \"${NATS_PASSWORD}\"}\n"},
		{"nats.credentials.creds_file", "nats:\n  credentials: {creds_file: \"${NATS_PASSWORD}\"}\n"},
		{"nats.credentials.nkey_seed_file", "nats:\n  credentials: {nkey_seed_file: \"${NATS_PASSWORD}\"}\n"},
	} {
		for _, getenv := range []func(string) string{env(), env("NATS_PASSWORD", "")} {
			_, err := config.Parse("engine.yaml", []byte(c.src), getenv)
			if err == nil || !errors.Is(err, domain.ErrInvalidConfig) {
				t.Errorf("%s from an empty variable:\n%s\nParse = %v, want a configuration error", c.key, c.src, err)
				continue
			}
			for _, w := range []string{c.key, "NATS_PASSWORD", "empty or unset"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		}
	}
	// Set, the same files are valid; and a key left out is no error.
	for _, src := range []string{
		"nats:\n  credentials: {user: engine_a, password: \"${NATS_PASSWORD}\"}\n",
		"nats:\n  credentials: {token: \"${NATS_PASSWORD}\"}\n",
		"nats:\n  credentials: {user: engine_a, password: \"${NATS_PASSWORD}\"}\n  caller_secret: \"${S}\"\nhttp: {listen: off}\n",
	} {
		parse(t, src, env("NATS_PASSWORD", "pw", "S", callerSecret))
	}
}

func TestAnHTTPTokenTooLongToFitARequestHeadIsRefused(t *testing.T) {
	long := "http: {token: \"${T}\"}\n"
	_, err := config.Parse("engine.yaml", []byte(long), env("T", strings.Repeat("t", config.MaxHTTPToken+1)))
	if err == nil {
		t.Fatal("Parse took a token no request head could carry")
	}
	for _, w := range []string{"http.token", "is 8193 bytes, want at most 8192", "431", "every request"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if _, err := config.Parse("engine.yaml", []byte(long), env("T", strings.Repeat("t", config.MaxHTTPToken))); err != nil {
		t.Fatalf("Parse refused a token of the most: %v", err)
	}
}
