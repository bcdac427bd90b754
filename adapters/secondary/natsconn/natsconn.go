// Package natsconn opens the engine's NATS connections with the
// deployment's credentials.
package natsconn

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/internal/redact"
)

// Options say how to reach and authenticate to the broker. At most one of
// CredsFile, NkeySeedFile, User and Token is set.
type Options struct {
	URL          string
	Name         string
	CredsFile    string
	NkeySeedFile string
	User         string
	Password     string
	Token        string
	CA           string
	Cert         string
	Key          string
	// ClosedHandler runs when the connection closes for good, reconnects
	// exhausted or closed by the engine.
	ClosedHandler func(*nats.Conn)
	// ClosedOnlyWhenLost keeps ClosedHandler from running when the
	// connection's owner closes it (Close): it runs only when the
	// connection closes for good on its own. A store's connection sets
	// it, since the store closes it itself, at a failed open as at its
	// Close.
	ClosedOnlyWhenLost bool
	// NoReconnectBuffer makes a publish fail at once while the connection
	// reconnects (nats.ErrReconnectBufExceeded), where nats.go would keep
	// it in a buffer and send it when the connection is back, however long
	// after the call that made it gave up. A store's connection sets it:
	// its writes are not fenced, and one held so would land after the
	// engine fenced itself and a successor wrote the same key. So does
	// the HTTP API's: a write its client saw fail would land later.
	NoReconnectBuffer bool
	// InboxPrefix, when set, replaces _INBOX for the answers to this
	// connection's requests.
	InboxPrefix string
	// Logger, when set, logs what the broker refuses without failing a
	// call, such as a publish its permissions deny: otherwise silent.
	Logger *slog.Logger
	// InProcess, when set, is a broker in this process, reached through
	// memory instead of a socket; URL then names it in messages only.
	InProcess nats.InProcessConnProvider
}

// Reconnection: a lost connection is tried again MaxReconnects times,
// ReconnectWait apart; then it closes for good and ClosedHandler runs.
// That takes about ten seconds when the broker refuses the connection, up
// to about a minute when it does not answer (each try waits out the dial
// timeout of 5 s), and a link that goes silent without being reset is
// noticed only when the client's pings go unanswered (nats.go's default:
// two, two minutes apart). None of this is what fences a serving engine:
// its lease clock does, at half a lease without a renewal, however long
// the connection takes to give up. A process that stays up without its
// broker helps nobody, so it then stops.
const (
	ReconnectWait = time.Second
	MaxReconnects = 10
)

// Connect dials the broker.
func Connect(o Options) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.Timeout(5 * time.Second),
		nats.MaxReconnects(MaxReconnects),
		nats.ReconnectWait(ReconnectWait),
	}
	if o.ClosedHandler != nil {
		opts = append(opts, nats.ClosedHandler(o.ClosedHandler))
	}
	if o.ClosedOnlyWhenLost {
		opts = append(opts, nats.NoCallbacksAfterClientClose())
	}
	if o.NoReconnectBuffer {
		opts = append(opts, nats.ReconnectBufSize(-1))
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	if o.InProcess != nil {
		opts = append(opts, nats.InProcessServer(o.InProcess))
	}
	if o.Logger != nil {
		opts = append(opts, nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{"connection", nc.Opts.Name, "err", err}
			if sub != nil {
				attrs = append(attrs, "subscription", sub.Subject)
			}
			o.Logger.Error("the NATS server refused an operation", attrs...)
		}))
	}
	switch {
	case o.CredsFile != "":
		if err := checkCreds(o.CredsFile, time.Now()); err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	case o.NkeySeedFile != "":
		opt, err := nats.NkeyOptionFromSeed(o.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats.credentials.nkey_seed_file: %w", err)
		}
		opts = append(opts, opt)
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	}
	if o.CA != "" {
		opts = append(opts, nats.RootCAs(o.CA))
	}
	if o.Cert != "" || o.Key != "" {
		if o.Cert == "" || o.Key == "" {
			return nil, errors.New("nats.credentials.tls: cert and key go together")
		}
		opts = append(opts, nats.ClientCert(o.Cert, o.Key))
	}
	nc, err := nats.Connect(o.URL, opts...)
	if errors.Is(err, nats.ErrAuthorization) {
		creds := o.credentials()
		if creds == "" {
			return nil, fmt.Errorf("connect to NATS at %s: %w (the server wants credentials, and none were given: set nats.credentials, or put them in nats.url)",
				redact.URLs(o.URL), err)
		}
		return nil, fmt.Errorf("connect to NATS at %s with %s: %w (the server refused these credentials: wrong, revoked, or not of this server)",
			redact.URLs(o.URL), creds, err)
	}
	// A server that refuses a client certificate closes the connection
	// after the handshake, or answers "certificate required" when the
	// client had none of the CAs it asked for: say which certificate, or
	// that there was none (a server with verify: true wants one of every
	// client). An x509 error is about the server's certificate and names
	// itself.
	if err != nil && isClientCertRefusal(err) {
		if o.Cert == "" {
			return nil, fmt.Errorf("connect to NATS at %s: %w (the server wants a client certificate, and none was given: set nats.credentials.tls.cert and nats.credentials.tls.key)",
				redact.URLs(o.URL), redact.Error(err))
		}
		return nil, fmt.Errorf("connect to NATS at %s: %w (the server did not accept the client certificate %s: is it signed by a CA the server trusts, and valid now?)",
			redact.URLs(o.URL), redact.Error(err), o.Cert)
	}
	if err != nil {
		// nats.go's own text may quote the URL, credentials and all.
		return nil, fmt.Errorf("connect to NATS at %s: %w", redact.URLs(o.URL), redact.Error(err))
	}
	return nc, nil
}

// credentials names the credentials in use, never their secret part, or
// is empty when there are none. nats.go takes a URL's user info before
// the options' credentials, so those of nats.url come first.
func (o Options) credentials() string {
	if user, ok := urlCredentials(o.URL); ok {
		if user != "" {
			return fmt.Sprintf("the user %q and its password in nats.url", user)
		}
		return "the token in nats.url"
	}
	switch {
	case o.CredsFile != "":
		return "nats.credentials.creds_file " + o.CredsFile
	case o.NkeySeedFile != "":
		return "nats.credentials.nkey_seed_file " + o.NkeySeedFile
	case o.User != "":
		return fmt.Sprintf("nats.credentials.user %q and its password", o.User)
	case o.Token != "":
		return "nats.credentials.token"
	case o.Cert != "":
		return "the client certificate " + o.Cert
	}
	return ""
}

// urlCredentials reports whether a URL of the comma-separated list carries
// credentials, and the user they name: none for a token.
func urlCredentials(urls string) (user string, ok bool) {
	for _, raw := range strings.Split(urls, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.User == nil {
			continue
		}
		if _, hasPassword := u.User.Password(); hasPassword {
			return u.User.Username(), true
		}
		return "", true
	}
	return "", false
}

// checkCreds reads the user JWT of a .creds file and refuses one that has
// expired or is not valid yet, which the server would refuse with a bare
// "Authorization Violation".
func checkCreds(path string, now time.Time) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("nats.credentials.creds_file: %w", err)
	}
	token, err := jwt.ParseDecoratedJWT(data)
	if err != nil {
		return fmt.Errorf("nats.credentials.creds_file %s: no user JWT in it: %w", path, err)
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return fmt.Errorf("nats.credentials.creds_file %s: the user JWT: %w", path, err)
	}
	switch {
	case claims.Expires > 0 && now.Unix() >= claims.Expires:
		return fmt.Errorf("nats.credentials.creds_file %s: the user JWT of %q (%s) expired at %s; renew it (nsc edit user --expiry, then nsc generate creds)",
			path, claims.Name, claims.Subject, time.Unix(claims.Expires, 0).UTC().Format(time.RFC3339))
	case claims.NotBefore > 0 && now.Unix() < claims.NotBefore:
		return fmt.Errorf("nats.credentials.creds_file %s: the user JWT of %q (%s) is not valid before %s",
			path, claims.Name, claims.Subject, time.Unix(claims.NotBefore, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

func isClientCertRefusal(err error) bool {
	msg := err.Error()
	return !strings.Contains(msg, "x509") &&
		(strings.Contains(msg, "after TLS handshake") || strings.Contains(msg, "tls: certificate required") || strings.Contains(msg, "tls: bad certificate") || strings.Contains(msg, "tls: unknown certificate authority"))
}
