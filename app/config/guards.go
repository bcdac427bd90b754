package config

import (
	"fmt"
	"strings"
)

// Guards says, one line each, how the configuration checks who calls the
// engine: on NATS and on the HTTP API. `engine config check` prints it, so
// an operator sees an unchecked door before the engine runs.
func (c *Config) Guards() []string {
	nats := "NATS callers: each call carries a token signed with nats.caller_secret"
	if c.NATS.CallerSecret == "" {
		nats = "NATS callers: NOT checked (nats.caller_secret is not set): every user of the account may call every service but secrets"
	}
	var http string
	switch {
	case c.HTTP.Off():
		http = "HTTP API: off"
	case c.HTTP.Token != "":
		http = fmt.Sprintf("HTTP API on %s: a bearer token (http.token) on every route but /healthz and /readyz", c.HTTP.Listen)
	default:
		names := append([]string{"an IP address", "localhost"}, c.HTTP.Hosts...)
		http = fmt.Sprintf("HTTP API on %s: no token; answers a Host of %s only", c.HTTP.Listen, strings.Join(names, ", "))
	}
	return []string{nats, http}
}
