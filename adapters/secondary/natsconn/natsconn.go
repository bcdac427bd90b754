// Package natsconn opens the engine's NATS connections with the
// deployment's credentials.
package natsconn

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

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
	// Logger, when set, logs what the broker refuses without failing a
	// call, such as a publish its permissions deny: otherwise silent.
	Logger *slog.Logger
}

// Reconnection: a lost connection is retried every second for about ten
// seconds; then it closes for good and ClosedHandler runs. A serving
// engine has fenced itself by then (half a lease), and a process that
// stays up without its broker helps nobody.
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
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redact.URLs(o.URL), err)
	}
	return nc, nil
}
