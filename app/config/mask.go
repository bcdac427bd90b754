package config

import (
	"regexp"

	"gopkg.in/yaml.v3"

	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/internal/redact"
	"github.com/abi-engine/engine/ports"
)

// masked replaces a secret's value in rendered configuration.
const masked = storage.Masked

// dsnPassword finds a password in a key=value connection string.
var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// Masked returns a copy for display, with every secret replaced: NATS
// credentials, the caller secret, the HTTP token, passwords in URLs and
// connection strings, and the adapter settings whose Config field is
// tagged secret:"true" (the storage registry knows each adapter's Config).
func (c *Config) Masked() *Config {
	m := *c
	cr := &m.NATS.Credentials
	for _, s := range []*string{&cr.Password, &cr.Token, &m.NATS.CallerSecret, &m.HTTP.Token} {
		*s = mask(*s)
	}
	m.NATS.URL = maskURLs(m.NATS.URL)
	sv := &m.Services
	for name, s := range map[string]*Service{
		ports.ServiceKeyValue: &sv.KeyValue, ports.ServiceDocument: &sv.Document, ports.ServiceObjectStorage: &sv.ObjectStorage,
		ports.ServiceVectorStore: &sv.VectorStore, ports.ServiceCache: &sv.Cache,
	} {
		s.Config = maskBlock(name, *s)
	}
	m.Services.Secret = make(Secrets, len(c.Services.Secret))
	for i, s := range c.Services.Secret {
		s.Config = maskBlock(ports.ServiceSecret, s)
		m.Services.Secret[i] = s
	}
	return &m
}

func mask(s string) string {
	if s == "" {
		return ""
	}
	return masked
}

// maskURLs hides the credentials of URLs and the passwords of key=value
// connection strings, wherever they appear in a value.
func maskURLs(s string) string {
	return dsnPassword.ReplaceAllString(redact.URLs(s), "${1}"+masked)
}

// maskBlock copies a block's settings with the fields its adapter declares
// secret masked, and passwords in URLs and connection strings.
func maskBlock(service string, s Service) yaml.Node {
	n := maskNode(s.Config)
	storage.MaskSecrets(service, s.Adapter, &n)
	return n
}

// maskNode deep-copies settings, masking the passwords of URLs and
// connection strings in every value.
func maskNode(n yaml.Node) yaml.Node {
	out := n
	out.Content = make([]*yaml.Node, len(n.Content))
	for i, ch := range n.Content {
		c := maskNode(*ch)
		out.Content[i] = &c
	}
	if out.Kind == yaml.ScalarNode {
		out.Value = maskURLs(out.Value)
	}
	if len(n.Content) == 0 {
		out.Content = nil
	}
	return out
}

// YAML renders the configuration. Render Masked() for display.
func (c *Config) YAML() ([]byte, error) { return yaml.Marshal(c) }
