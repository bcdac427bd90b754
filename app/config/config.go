// Package config reads engine.yaml: the NATS connection and the engine's
// role and timing, one block per storage service, the HTTP listener and the
// data directory. Loading is strict (an unknown key is an error naming it
// and its line), "${VAR}" in a value is expanded from the environment once
// YAML has read the value, so it is taken verbatim whatever the quoting,
// and ABI_ENGINE_ROLE, ABI_ROLLOUT_ID and NATS_URL override the file.
//
// Each service block is {adapter: <name>, config: {...}}. The config part
// stays a YAML node here: the storage registry decodes it into the chosen
// adapter's own Config, and is asked which names exist and which settings
// are secret, so this package names no adapter.
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/ports"
)

// Config is the whole file, resolved: defaults, then the file, then the
// environment overrides.
type Config struct {
	NATS     NATS     `yaml:"nats"`
	Services Services `yaml:"services"`
	HTTP     HTTP     `yaml:"http"`
	// DataDir holds every local backend's files by default.
	DataDir string `yaml:"data_dir"`

	// source names the file in error messages; lines maps a key path such
	// as "nats.engine.role" to its line in the file.
	source string
	lines  map[string]int
	// fromEnv maps a key path to the variable, or the flag (SetBy), that
	// overrode it.
	fromEnv map[string]string
	// emptyVars maps the line of a key to the "${VAR}"s in its value that
	// expanded to nothing.
	emptyVars map[int][]string
}

// NATS is the connection and the engine's part on its account.
type NATS struct {
	// URL is one server URL or a comma-separated list.
	URL         string      `yaml:"url"`
	Credentials Credentials `yaml:"credentials"`
	// CallerSecret, when set, makes callers sign their requests. Leaving
	// the key out is the only way to run without caller tokens: a key that
	// is present must hold at least MinCallerSecret bytes.
	CallerSecret string `yaml:"caller_secret,omitempty"`
	// InboxPrefix, when set, is where the engine's requests get their
	// answers instead of _INBOX: a client engine that connects as a caller
	// user confined to its own prefix (deploy/nats) sets it.
	InboxPrefix string `yaml:"inbox_prefix,omitempty"`
	Engine      Engine `yaml:"engine"`
}

// Credentials authenticate the NATS connection; at most one of CredsFile,
// NkeySeedFile, User (with Password) and Token.
type Credentials struct {
	CredsFile    string `yaml:"creds_file"`
	NkeySeedFile string `yaml:"nkey_seed_file"`
	User         string `yaml:"user"`
	Password     string `yaml:"password"`
	Token        string `yaml:"token"`
	TLS          TLS    `yaml:"tls"`
}

// TLS are PEM files: a CA to trust, and a client certificate with its key.
type TLS struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Engine is nats.engine: the role and the lease's timing.
type Engine struct {
	Role                  string `yaml:"role"`
	RolloutID             string `yaml:"rollout_id"`
	LeaseSeconds          int    `yaml:"lease_seconds"`
	StandbyTimeoutSeconds int    `yaml:"standby_timeout_seconds"`
	DrainSeconds          int    `yaml:"drain_seconds"`
	// BucketReplicas is the lease bucket's replica count: 1, or 3 on a
	// clustered JetStream. It applies when the bucket is made; a serving
	// engine refuses a bucket on fewer replicas.
	BucketReplicas int `yaml:"bucket_replicas"`
	// HotStandby makes an engine that finds a live holder wait, backends
	// open, instead of failing, and take over when the holder dies.
	HotStandby bool `yaml:"hot_standby"`
}

// MinCallerSecret is the shortest caller secret accepted, in bytes: the
// tokens are HS256, whose key should be no shorter than its hash.
const MinCallerSecret = 32

// HTTPOff as http.listen switches the HTTP API off.
const HTTPOff = "off"

// HTTP is the HTTP API's listener.
type HTTP struct {
	// Listen is host:port, or HTTPOff.
	Listen string `yaml:"listen"`
	// Token, when set, is required as a bearer token on every request.
	Token string `yaml:"token"`
	// Hosts are the names, besides the listen address, that a request's
	// Host header may carry when no token is set: what keeps a web page in
	// a browser from reaching the API through a name it controls (DNS
	// rebinding). A name is a host, or host:port to allow that port only.
	Hosts []string `yaml:"hosts,omitempty"`
	// TrustedProxies are the reverse proxies in front of the API, each a
	// CIDR or a single address, IPv4 or IPv6: a request whose connection
	// comes from one counts against the client that ProxyHeader names
	// (see Proxies), where every other counts against its connection's
	// address.
	TrustedProxies []string `yaml:"trusted_proxies,omitempty"`
	// ProxyHeader is the header the trusted proxies write the client's
	// address into: x-forwarded-for (the default, when empty) or
	// forwarded (RFC 7239), in any case. The other is not read, since a
	// proxy passes on as the client wrote it a header it does not write.
	ProxyHeader string `yaml:"proxy_header,omitempty"`
	// MaxProxyConnections bounds the connections the trusted proxies hold
	// to the API, all of them together; 0 is the API's default (4096).
	MaxProxyConnections int `yaml:"max_proxy_connections,omitempty"`
	// MaxConnectionsPerProxy bounds the connections one trusted proxy
	// address holds to the API, of MaxProxyConnections; 0 is a quarter of
	// them when a trusted range is wider than one address, and all of them
	// when every trusted proxy is listed by its one address.
	MaxConnectionsPerProxy int `yaml:"max_connections_per_proxy,omitempty"`
	// MaxClientConnections bounds the connections the clients that are not
	// trusted proxies hold to the API, all of them together; 0 is the
	// API's default (4096).
	MaxClientConnections int `yaml:"max_client_connections,omitempty"`
}

// UsesForwarded reports whether the trusted proxies write Forwarded rather
// than X-Forwarded-For (see ProxyHeader); a ProxyHeader that names neither
// is an error.
func (h HTTP) UsesForwarded() (bool, error) {
	switch {
	case h.ProxyHeader == "", strings.EqualFold(h.ProxyHeader, "x-forwarded-for"):
		return false, nil
	case strings.EqualFold(h.ProxyHeader, "forwarded"):
		return true, nil
	}
	return false, fmt.Errorf("%q: want x-forwarded-for or forwarded", h.ProxyHeader)
}

// Off reports whether the HTTP API is switched off.
func (h HTTP) Off() bool { return h.Listen == HTTPOff }

// Proxies are TrustedProxies parsed: a single address is a prefix of its
// whole length, and an IPv4 address or CIDR written as IPv6
// (::ffff:10.0.0.0/104) is taken as the IPv4 one. An entry that is
// neither, one with a zone, and a CIDR with bits set past its length
// (10.0.0.1/8, which may mean the one address or the network) are an
// error naming the entry.
func (h HTTP) Proxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range h.TrustedProxies {
		p, err := parseProxy(s)
		if err != nil {
			return nil, fmt.Errorf("entry %d %q: %w", i, s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func parseProxy(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, errors.New("want an IP address, such as 192.168.1.7 or fd00::7, or a CIDR, such as 10.0.0.0/8 or fd00::/64")
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, errors.New("want a CIDR, such as 10.0.0.0/8 or fd00::/64, or an IP address")
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("has bits set past its /%d: write %s for the network, or the address alone for one host", p.Bits(), p.Masked())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, nil
}

// Services holds one block per storage service. Secret is a list of
// sources (a single block is read as a list of one); the others are one
// block each.
type Services struct {
	KeyValue      Service `yaml:"keyvalue"`
	Document      Service `yaml:"document"`
	ObjectStorage Service `yaml:"object_storage"`
	VectorStore   Service `yaml:"vector_store"`
	Cache         Service `yaml:"cache"`
	Secret        Secrets `yaml:"secret"`
}

// AdapterOff switches a service off: the engine neither owns nor serves
// it.
const AdapterOff = storage.Off

// Service is one service block.
type Service struct {
	// Adapter is a registered adapter's name (storage.Adapters), or "off".
	Adapter string `yaml:"adapter"`
	// Config is the adapter's own block, decoded by the storage registry.
	Config yaml.Node `yaml:"config,omitempty"`
}

// Secrets are the secret sources, asked in order.
type Secrets []Service

// Off reports whether the block switches its service off.
func (s Service) Off() bool { return s.Adapter == AdapterOff }

// Default is the configuration without a file: a single engine on a local
// NATS server with every service on local backends under ./.engine.
func Default() *Config {
	return &Config{
		NATS: NATS{
			URL: "nats://127.0.0.1:4222",
			Engine: Engine{
				Role:                  domain.RoleServe.String(),
				LeaseSeconds:          20,
				StandbyTimeoutSeconds: 900,
				DrainSeconds:          60,
				BucketReplicas:        1,
			},
		},
		Services: Services{
			KeyValue:      Service{Adapter: "sqlite"},
			Document:      Service{Adapter: "sqlite"},
			ObjectStorage: Service{Adapter: "localfs"},
			VectorStore:   Service{Adapter: "sqlite"},
			Cache:         Service{Adapter: "memory"},
			Secret:        Secrets{{Adapter: "env"}},
		},
		HTTP:    HTTP{Listen: "127.0.0.1:8080"},
		DataDir: "./.engine",
	}
}

// Role is the parsed nats.engine.role; Load has validated it.
func (c *Config) Role() domain.Role {
	r, _ := domain.ParseRole(c.NATS.Engine.Role)
	return r
}

// Timing is the lease's timing from nats.engine.
func (c *Config) Timing() domain.Timing {
	e := c.NATS.Engine
	return domain.Timing{
		Lease:          time.Duration(e.LeaseSeconds) * time.Second,
		StandbyTimeout: time.Duration(e.StandbyTimeoutSeconds) * time.Second,
		Drain:          time.Duration(e.DrainSeconds) * time.Second,
	}
}

// Block is one service block with its place.
type Block struct {
	// Name is the service's name, ports.ServiceKeyValue and the like.
	Name string
	// Key is where the block is in the file: "services.keyvalue" or
	// "services.secret[1]".
	Key     string
	Service Service
}

// Blocks lists every service block in service order, secrets last, each
// with the key it has in the file.
func (c *Config) Blocks() []Block {
	s := c.Services
	out := []Block{
		{Name: ports.ServiceKeyValue, Key: "services.keyvalue", Service: s.KeyValue},
		{Name: ports.ServiceDocument, Key: "services.document", Service: s.Document},
		{Name: ports.ServiceObjectStorage, Key: "services.object_storage", Service: s.ObjectStorage},
		{Name: ports.ServiceVectorStore, Key: "services.vector_store", Service: s.VectorStore},
		{Name: ports.ServiceCache, Key: "services.cache", Service: s.Cache},
	}
	for i, b := range s.Secret {
		out = append(out, Block{Name: ports.ServiceSecret, Key: secretKey(i), Service: b})
	}
	return out
}

// Line is the line of a key path in the file, 0 when the value did not
// come from the file.
func (c *Config) Line(key string) int { return c.lines[key] }
