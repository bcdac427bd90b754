package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/redact"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// validate checks every value and names the first bad one by its key.
// Validate checks the configuration again, after a caller changed it: a
// command-line flag's value is held to the rules a file's is.
func (c *Config) Validate() error { return c.validate() }

func (c *Config) validate() error {
	for _, check := range []func() error{c.validateNATS, c.validateEngine, c.validateHTTP, c.validateCallers, c.validateServices} {
		if err := check(); err != nil {
			return err
		}
	}
	if c.DataDir == "" {
		return c.errAt("data_dir", errors.New("is empty"))
	}
	return nil
}

func (c *Config) validateNATS() error {
	if c.NATS.URL == "" {
		return c.errAt("nats.url", errors.New("is empty"))
	}
	urls := strings.Split(c.NATS.URL, ",")
	for i, raw := range urls {
		raw = strings.TrimSpace(raw)
		u, err := url.Parse(raw)
		if err != nil {
			return c.errAt("nats.url", fmt.Errorf("%q is not a URL", quotedURL(urls, i)))
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return c.errAt("nats.url", fmt.Errorf("%q: want a nats://, tls://, ws:// or wss:// URL", quotedURL(urls, i)))
		}
		if u.Host == "" {
			return c.errAt("nats.url", fmt.Errorf("%q has no host", quotedURL(urls, i)))
		}
	}
	if p := c.NATS.InboxPrefix; p != "" && !wire.IsInbox(p+".x") {
		return c.errAt("nats.inbox_prefix", fmt.Errorf("%q: want subject tokens under %s joined by dots, without wildcards, such as _INBOX.caller_a: engines answer only into inboxes", p, wire.InboxPrefix))
	}
	cr := c.NATS.Credentials
	// A credential from a variable that is empty or unset would connect
	// with an empty password, or with no credentials at all: as whoever
	// the server takes an anonymous client for. Leaving the key out is
	// how to run without.
	for _, f := range []struct{ key, v string }{
		{"nats.credentials.password", cr.Password}, {"nats.credentials.token", cr.Token},
		{"nats.credentials.creds_file", cr.CredsFile}, {"nats.credentials.nkey_seed_file", cr.NkeySeedFile},
	} {
		if v := c.emptyVar(f.key); v != "" && f.v == "" {
			return c.errFromVar(f.key, v, errors.New(
				"the variable is empty or unset; set it, or leave the key out to connect without it"))
		}
	}
	var set []string
	for _, f := range []struct{ key, v string }{
		{"creds_file", cr.CredsFile}, {"nkey_seed_file", cr.NkeySeedFile}, {"user", cr.User}, {"token", cr.Token},
	} {
		if f.v != "" {
			set = append(set, f.key)
		}
	}
	if len(set) > 1 {
		return c.errAt("nats.credentials."+set[1], fmt.Errorf("set only one of creds_file, nkey_seed_file, user and token, not %s", strings.Join(set, " and ")))
	}
	if cr.Password != "" && cr.User == "" {
		return c.errAt("nats.credentials.password", errors.New("needs nats.credentials.user"))
	}
	if (cr.TLS.Cert == "") != (cr.TLS.Key == "") {
		if cr.TLS.Cert == "" {
			return c.errAt("nats.credentials.tls.key", errors.New("needs nats.credentials.tls.cert"))
		}
		return c.errAt("nats.credentials.tls.cert", errors.New("needs nats.credentials.tls.key"))
	}
	return nil
}

// maxSeconds bounds every nats.engine period (about 34 years), so that
// each, and the sums the engine's budgets make of them, fit a
// time.Duration.
const maxSeconds = 1 << 30

func (c *Config) validateEngine() error {
	e := c.NATS.Engine
	if _, err := domain.ParseRole(e.Role); err != nil {
		return c.errAt("nats.engine.role", err)
	}
	if err := domain.ValidateRolloutID(e.RolloutID); err != nil {
		return c.errAt("nats.engine.rollout_id", err)
	}
	// The seconds become time.Durations, and the start's and the stop's
	// budgets sums of them: a value beyond maxSeconds either way would
	// wrap around, into a valid lease or a stop budget already spent.
	for _, f := range []struct {
		key string
		v   int
	}{
		{"nats.engine.lease_seconds", e.LeaseSeconds},
		{"nats.engine.standby_timeout_seconds", e.StandbyTimeoutSeconds},
		{"nats.engine.drain_seconds", e.DrainSeconds},
	} {
		if f.v > maxSeconds || f.v < -maxSeconds {
			return c.errAt(f.key, fmt.Errorf("is %d, out of range: a period is at most %d seconds", f.v, maxSeconds))
		}
	}
	if err := c.Timing().Validate(); err != nil {
		// Timing names the key it refuses; the line is looked up by it.
		for _, key := range []string{"nats.engine.lease_seconds", "nats.engine.standby_timeout_seconds", "nats.engine.drain_seconds"} {
			if strings.Contains(err.Error(), key) {
				e := c.errAt(key, err).(*Error)
				e.Key = ""
				return e
			}
		}
		return c.errAt("nats.engine", err)
	}
	if e.StandbyTimeoutSeconds <= e.LeaseSeconds {
		// A standby takes over from a holder that died only after a lease
		// of silence: one that gives up sooner never does, nor does its
		// restart, and after a crash no engine serves.
		return c.errAt("nats.engine.standby_timeout_seconds", fmt.Errorf(
			"is %d, want more than nats.engine.lease_seconds (%d): a standby takes over from a holder that died only after a lease of silence",
			e.StandbyTimeoutSeconds, e.LeaseSeconds))
	}
	if e.BucketReplicas != 1 && e.BucketReplicas != 3 {
		return c.errAt("nats.engine.bucket_replicas", fmt.Errorf("is %d, want 1 or 3", e.BucketReplicas))
	}
	return nil
}

// MaxHTTPToken bounds http.token. The HTTP API refuses a request whose
// line and headers pass 16 KiB (its MaxHeaderBytes), and every request
// carries the token in its Authorization header beside a key of the most,
// percent-encoded whole, a content type and a proxy's X-Forwarded-For:
// a token past 8 KiB would leave too little room for them, and one past
// 16 KiB would have every request refused, while the engine started and
// served as though the API worked.
const MaxHTTPToken = 8 << 10

func (c *Config) validateHTTP() error {
	if v := c.emptyVar("http.token"); v != "" && c.HTTP.Token == "" {
		return c.errFromVar("http.token", v, errors.New(
			"the variable is empty or unset; set it, or leave the key out to run the HTTP API without a token"))
	}
	if len(c.HTTP.Token) > MaxHTTPToken {
		return c.errAt("http.token", fmt.Errorf(
			"is %d bytes, want at most %d: the API refuses (431) a request whose line and headers pass 16 KiB, so a longer token would refuse every request",
			len(c.HTTP.Token), MaxHTTPToken))
	}
	for i, h := range c.HTTP.Hosts {
		if h == "" || strings.ContainsAny(h, "/@ \t") {
			return c.errAt("http.hosts", fmt.Errorf("entry %d %q: want a host name, or host:port", i, h))
		}
	}
	if _, err := c.HTTP.Proxies(); err != nil {
		return c.errAt("http.trusted_proxies", err)
	}
	if _, err := c.HTTP.UsesForwarded(); err != nil {
		return c.errAt("http.proxy_header", err)
	}
	if n := c.HTTP.MaxProxyConnections; n < 0 {
		return c.errAt("http.max_proxy_connections", fmt.Errorf("%d: want a count of connections, or 0 for the default", n))
	}
	if n := c.HTTP.MaxConnectionsPerProxy; n < 0 {
		return c.errAt("http.max_connections_per_proxy", fmt.Errorf("%d: want a count of connections, or 0 for a quarter of http.max_proxy_connections", n))
	}
	if n := c.HTTP.MaxClientConnections; n < 0 {
		return c.errAt("http.max_client_connections", fmt.Errorf("%d: want a count of connections, or 0 for the default", n))
	}
	if c.HTTP.Off() {
		return nil
	}
	// An empty host listens on every interface, which is allowed.
	_, port, err := net.SplitHostPort(c.HTTP.Listen)
	if err != nil {
		return c.errAt("http.listen", fmt.Errorf("%q: want host:port, or off", c.HTTP.Listen))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return c.errAt("http.listen", fmt.Errorf("%q: port %q is not 0 to 65535", c.HTTP.Listen, port))
	}
	return nil
}

func (c *Config) validateServices() error {
	blocks := c.Blocks()
	secrets := 0
	for _, b := range blocks {
		if b.Name == ports.ServiceSecret {
			secrets++
		}
	}
	for _, b := range blocks {
		s := b.Service
		// The registry is the one list of adapter names: built-in adapters
		// and those a program registers before loading are alike.
		known := storage.Adapters(b.Name)
		switch {
		case s.Adapter == "":
			return c.errAt(b.Key, fmt.Errorf("adapter is missing: want one of %s or off", strings.Join(known, ", ")))
		case s.Adapter == AdapterOff && b.Name == ports.ServiceSecret && secrets > 1:
			return c.errAt(b.Key+".adapter", errors.New("off switches secrets off, so it cannot be one source among others"))
		case s.Adapter != AdapterOff && !slices.Contains(known, s.Adapter):
			return c.errAt(b.Key+".adapter", fmt.Errorf("%q: want one of %s or off", s.Adapter, strings.Join(known, ", ")))
		}
	}
	// A cache tier stores its entries through another service, which must
	// then be on.
	switch tier := c.Services.Cache.Adapter; tier {
	case ports.ServiceKeyValue, ports.ServiceObjectStorage:
		used := c.Services.KeyValue
		if tier == ports.ServiceObjectStorage {
			used = c.Services.ObjectStorage
		}
		if used.Off() {
			return c.errAt("services.cache.adapter", fmt.Errorf("the %s tier needs services.%s, which is off", tier, tier))
		}
	}
	return nil
}

// validateCallers keeps caller checking from being switched off by
// mistake: a caller_secret key that is present must hold a secret, a
// variable that expands to nothing is named, and a secret comes with an
// HTTP API that is guarded or off, since the API calls the services on
// behalf of whoever reaches it.
func (c *Config) validateCallers() error {
	const key = "nats.caller_secret"
	secret := c.NATS.CallerSecret
	if secret == "" {
		if _, present := c.lines[key]; !present {
			return nil
		}
		if v := c.emptyVar(key); v != "" {
			return c.errFromVar(key, v, errors.New(
				"the variable is empty or unset; set it, or leave the key out to run without caller tokens"))
		}
		return c.errAt(key, fmt.Errorf(
			"is empty; set a secret of at least %d bytes, or leave the key out to run without caller tokens", MinCallerSecret))
	}
	if len(secret) < MinCallerSecret {
		return c.errAt(key, fmt.Errorf(
			"is %d bytes, want at least %d (for example the output of `openssl rand -base64 32`)", len(secret), MinCallerSecret))
	}
	if c.HTTP.Token == "" && !c.HTTP.Off() {
		return c.errAt("http.token", fmt.Errorf(
			"is empty while nats.caller_secret is set: the HTTP API at %s would call every service for anyone who reaches it, unsigned; set http.token, or set http.listen to off",
			c.HTTP.Listen))
	}
	return nil
}

// emptyVar names the "${VAR}"s in key's value that expanded to nothing,
// "" when none did.
func (c *Config) emptyVar(key string) string {
	line, ok := c.lines[key]
	if !ok {
		return ""
	}
	return strings.Join(c.emptyVars[line], ", ")
}

// errFromVar is an error about a key whose value came from variables.
func (c *Config) errFromVar(key, vars string, err error) error {
	return &Error{Source: c.source, Line: c.lines[key], Key: key, Env: vars, Err: err}
}

// quotedURL is the i-th of the URLs nats.url is split into at its commas,
// as an error quotes it: its credentials hidden, and those of a password
// that holds a comma too. nats.go splits the list the same way, so such a
// password leaves its start in this URL, which then has no "@", and its
// end in the ones after it up to the one with the "@", none of them with
// a "://" of its own; they are quoted as one, the whole password hidden.
func quotedURL(urls []string, i int) string {
	if !strings.Contains(urls[i], "@") {
		for j := i + 1; j < len(urls) && !strings.Contains(urls[j], "://"); j++ {
			if strings.Contains(urls[j], "@") {
				return redact.URL(strings.TrimSpace(strings.Join(urls[i:j+1], ",")))
			}
		}
	}
	return redact.URL(strings.TrimSpace(urls[i]))
}
