package config

import (
	"regexp"

	"gopkg.in/yaml.v3"
)

// masked replaces a secret's value in rendered configuration.
const masked = "***"

// secretName matches the keys of adapter settings whose values are secrets.
var secretName = regexp.MustCompile(`(?i)(password|passwd|token|secret|api_?key|private_?key)`)

// dsnPassword finds a password in a key=value connection string.
var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// Masked returns a copy for display, with every secret replaced: NATS
// credentials, the caller secret, the HTTP token, passwords in URLs and
// connection strings, and adapter settings named like secrets.
func (c *Config) Masked() *Config {
	m := *c
	cr := &m.NATS.Credentials
	for _, s := range []*string{&cr.Password, &cr.Token, &m.NATS.CallerSecret, &m.HTTP.Token} {
		*s = mask(*s)
	}
	m.NATS.URL = maskURLs(m.NATS.URL)
	sv := &m.Services
	for _, s := range []*Service{&sv.KeyValue, &sv.Document, &sv.ObjectStorage, &sv.VectorStore, &sv.Cache} {
		s.Config = maskNode(s.Config)
	}
	m.Services.Secret = make(Secrets, len(c.Services.Secret))
	for i, s := range c.Services.Secret {
		s.Config = maskNode(s.Config)
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

// urlPassword finds the password of a URL's user info, in one URL or a
// comma-separated list.
var urlPassword = regexp.MustCompile(`(://[^/@:,\s]*:)[^/@,\s]*@`)

// maskURLs hides the passwords of URLs and of key=value connection
// strings, wherever they appear in a value.
func maskURLs(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}"+masked+"@")
	return dsnPassword.ReplaceAllString(s, "${1}"+masked)
}

// maskNode copies an adapter's settings with secrets masked.
func maskNode(n yaml.Node) yaml.Node {
	out := n
	out.Content = make([]*yaml.Node, len(n.Content))
	for i, ch := range n.Content {
		c := maskNode(*ch)
		out.Content[i] = &c
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(out.Content); i += 2 {
			v := out.Content[i+1]
			if v.Kind == yaml.ScalarNode && secretName.MatchString(out.Content[i].Value) && v.Value != "" {
				v.Value, v.Tag, v.Style = masked, "!!str", 0
			}
		}
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
