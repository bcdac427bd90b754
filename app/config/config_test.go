package config_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	secretenv "github.com/abi-engine/engine/adapters/secondary/secret/env"
	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/ports"
)

// env is a fixed environment.
func env(vars ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(vars); i += 2 {
		m[vars[i]] = vars[i+1]
	}
	return func(k string) string { return m[k] }
}

func parse(t *testing.T, src string, getenv func(string) string) *config.Config {
	t.Helper()
	c, err := config.Parse("engine.yaml", []byte(src), getenv)
	if err != nil {
		t.Fatalf("Parse:\n%s\nerr: %v", src, err)
	}
	return c
}

func TestDefaults(t *testing.T) {
	for _, src := range []string{"", "# nothing but a comment\n", "nats:\nservices:\n  secret:\n"} {
		c := parse(t, src, env())
		e := c.NATS.Engine
		checks := []struct {
			key       string
			got, want any
		}{
			{"nats.url", c.NATS.URL, "nats://127.0.0.1:4222"},
			{"nats.credentials", c.NATS.Credentials, config.Credentials{}},
			{"nats.caller_secret", c.NATS.CallerSecret, ""},
			{"nats.engine.role", e.Role, "serve"},
			{"nats.engine.rollout_id", e.RolloutID, ""},
			{"nats.engine.lease_seconds", e.LeaseSeconds, 20},
			{"nats.engine.standby_timeout_seconds", e.StandbyTimeoutSeconds, 900},
			{"nats.engine.drain_seconds", e.DrainSeconds, 60},
			{"nats.engine.bucket_replicas", e.BucketReplicas, 1},
			{"http.listen", c.HTTP.Listen, "127.0.0.1:8080"},
			{"http.token", c.HTTP.Token, ""},
			{"data_dir", c.DataDir, "./.engine"},
			{"Role()", c.Role(), domain.RoleServe},
			{"Timing()", c.Timing(), domain.DefaultTiming()},
		}
		for _, ch := range checks {
			if ch.got != ch.want {
				t.Errorf("%q: %s = %v, want %v", src, ch.key, ch.got, ch.want)
			}
		}
		want := map[string]string{
			"services.keyvalue": "sqlite", "services.document": "sqlite", "services.object_storage": "localfs",
			"services.vector_store": "sqlite", "services.cache": "memory", "services.secret[0]": "env",
		}
		blocks := c.Blocks()
		if len(blocks) != len(want) {
			t.Fatalf("%q: %d service blocks, want %d", src, len(blocks), len(want))
		}
		for _, b := range blocks {
			if b.Service.Adapter != want[b.Key] || !b.Service.Config.IsZero() {
				t.Errorf("%q: %s is %+v, want adapter %s with no config", src, b.Key, b.Service, want[b.Key])
			}
		}
	}
}

func TestLoadWithoutAFileUsesTheDefaultsAndTheEnvironment(t *testing.T) {
	t.Setenv(config.EnvRole, "auto")
	t.Setenv(config.EnvRolloutID, "")
	t.Setenv(config.EnvNATSURL, "")
	c, err := config.Load("")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if c.Role() != domain.RoleAuto || c.NATS.URL != "nats://127.0.0.1:4222" {
		t.Fatalf("Load(\"\") gives role %v and url %s", c.Role(), c.NATS.URL)
	}
}

// callerSecret is a caller secret of the shortest length accepted.
const callerSecret = "0123456789abcdef0123456789abcdef"

const full = `
nats:
  url: nats://nats-1:4222,nats://nats-2:4222
  credentials: {creds_file: /etc/engine/nats.creds, tls: {ca: ca.pem, cert: c.pem, key: k.pem}}
  caller_secret: ${CALLER}
  engine: {role: auto, rollout_id: "v1.4.0", lease_seconds: 5, standby_timeout_seconds: 60, drain_seconds: 0, bucket_replicas: 3}
services:
  keyvalue:       {adapter: postgres, config: {dsn: "${PG_DSN}"}}
  object_storage: {adapter: s3, config: {endpoint: "http://s3:7070", bucket: b, region: r, access_key: ak, secret_key: sk, path_style: true}}
  vector_store:   {adapter: off}
  cache:          {adapter: keyvalue}
  secret:
    - {adapter: dotenv, config: {path: .env}}
    - {adapter: env}
http: {listen: ":9090", token: tok, hosts: [engine.internal, "engine.example:443"]}
data_dir: /var/lib/engine
`

func TestTheFileOverridesTheDefaults(t *testing.T) {
	c := parse(t, full, env("CALLER", callerSecret, "PG_DSN", "postgres://u:p@db/engine"))
	e := c.NATS.Engine
	if c.NATS.URL != "nats://nats-1:4222,nats://nats-2:4222" || c.NATS.Credentials.CredsFile != "/etc/engine/nats.creds" ||
		c.NATS.Credentials.TLS != (config.TLS{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}) || c.NATS.CallerSecret != callerSecret {
		t.Fatalf("nats: %+v", c.NATS)
	}
	if e != (config.Engine{Role: "auto", RolloutID: "v1.4.0", LeaseSeconds: 5, StandbyTimeoutSeconds: 60, DrainSeconds: 0, BucketReplicas: 3}) {
		t.Fatalf("nats.engine: %+v", e)
	}
	if h := c.HTTP; h.Listen != ":9090" || h.Token != "tok" || !slices.Equal(h.Hosts, []string{"engine.internal", "engine.example:443"}) || c.DataDir != "/var/lib/engine" {
		t.Fatalf("http %+v, data_dir %s", c.HTTP, c.DataDir)
	}
	s := c.Services
	if s.KeyValue.Adapter != "postgres" || s.Document.Adapter != "sqlite" || s.ObjectStorage.Adapter != "s3" ||
		!s.VectorStore.Off() || s.Cache.Adapter != "keyvalue" || len(s.Secret) != 2 || s.Secret[0].Adapter != "dotenv" {
		t.Fatalf("services: %+v", s)
	}
	var kv struct {
		DSN string `yaml:"dsn"`
	}
	if err := s.KeyValue.Config.Decode(&kv); err != nil || kv.DSN != "postgres://u:p@db/engine" {
		t.Fatalf("services.keyvalue.config decodes to %+v, %v", kv, err)
	}
	if got := c.Line("services.object_storage"); got != 9 {
		t.Fatalf("services.object_storage is on line %d, want 9", got)
	}
}

func TestTheEnvironmentOverridesTheFile(t *testing.T) {
	src := "nats: {url: nats://file:4222, engine: {role: client, rollout_id: from-file}}\n"
	cases := []struct {
		name                  string
		getenv                func(string) string
		role, rollout, natURL string
	}{
		{"Unset", env(), "client", "from-file", "nats://file:4222"},
		{"EmptyDoesNotOverride", env(config.EnvRole, "", config.EnvRolloutID, "", config.EnvNATSURL, ""), "client", "from-file", "nats://file:4222"},
		{"Role", env(config.EnvRole, "auto"), "auto", "from-file", "nats://file:4222"},
		{"RolloutID", env(config.EnvRolloutID, "r7"), "client", "r7", "nats://file:4222"},
		{"NATSURL", env(config.EnvNATSURL, "nats://env:4222"), "client", "from-file", "nats://env:4222"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := parse(t, src, tc.getenv)
			if e := c.NATS.Engine; e.Role != tc.role || e.RolloutID != tc.rollout || c.NATS.URL != tc.natURL {
				t.Fatalf("role %q rollout %q url %q, want %q %q %q", e.Role, e.RolloutID, c.NATS.URL, tc.role, tc.rollout, tc.natURL)
			}
		})
	}
}

func TestAnInvalidOverrideNamesItsVariable(t *testing.T) {
	for _, tc := range []struct{ env, value, key string }{
		{config.EnvRole, "boss", "nats.engine.role"},
		{config.EnvRolloutID, "not ok!", "nats.engine.rollout_id"},
		{config.EnvNATSURL, "http://x", "nats.url"},
	} {
		_, err := config.Parse("engine.yaml", nil, env(tc.env, tc.value))
		want := fmt.Sprintf("%s (from %s)", tc.key, tc.env)
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, domain.ErrInvalidConfig) {
			t.Errorf("%s=%q: err %v, want one naming %q", tc.env, tc.value, err, want)
		}
	}
}

func TestExpansion(t *testing.T) {
	getenv := env("HOST", "db.internal", "PASS", "pa ss", "EMPTY", "")
	c := parse(t, "services:\n  keyvalue: {adapter: postgres, config: {dsn: \"postgres://u:${PASS}@${HOST}/x${UNSET}${EMPTY}\"}}\n", getenv)
	var kv struct {
		DSN string `yaml:"dsn"`
	}
	if err := c.Services.KeyValue.Config.Decode(&kv); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if want := "postgres://u:pa ss@db.internal/x"; kv.DSN != want {
		t.Fatalf("dsn %q, want %q", kv.DSN, want)
	}
	for _, tc := range []struct {
		src  string
		line int
	}{
		{"data_dir: ${HOST\n", 1},
		{"# ok\nhttp:\n  listen: ${HOST:8080\n", 3},
		{"data_dir: ${not a name}\n", 1},
		{"data_dir: ${}\n", 1},
	} {
		_, err := config.Parse("engine.yaml", []byte(tc.src), getenv)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("engine.yaml line %d:", tc.line)) || !errors.Is(err, domain.ErrInvalidConfig) {
			t.Errorf("%q: err %v, want an error at line %d", tc.src, err, tc.line)
		}
	}
}

// A variable's value is the value, in every quoting style: the shipped
// ConfigMap writes password: "${NATS_PASSWORD}", and a secret whose
// backslash became an escape, or whose quote ended the scalar, gave the
// engine another secret than its callers and the broker have, or a file
// that did not parse. A plain value is typed as if written there.
func TestAVariableIsTakenVerbatimWhateverItsQuoting(t *testing.T) {
	for _, tc := range []struct {
		name, src, value string
	}{
		{"DoubleQuotedWithABackslash", `data_dir: "${V}"`, `pa\tss`},
		{"DoubleQuotedWithAQuote", `data_dir: "${V}"`, `pa"ss`},
		{"SingleQuotedWithAQuote", `data_dir: '${V}'`, `it's`},
		{"InAFlowMapping", `nats: {credentials: {user: u, password: "${V}"}}`, `pa\"ss', x: {`},
		{"PlainWithYAMLSyntax", `data_dir: ${V}`, "a: b #c"},
		{"PlainNull", `data_dir: ${V}`, "null"},
		{"LiteralBlock", "data_dir: |-\n  ${V}", `pa\tss"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parse(t, tc.src+"\n", env("V", tc.value))
			got := c.DataDir
			if strings.HasPrefix(tc.src, "nats:") {
				got = c.NATS.Credentials.Password
			}
			if got != tc.value {
				t.Fatalf("%s read %q, the variable holds %q", tc.src, got, tc.value)
			}
		})
	}
	if c := parse(t, "nats:\n  engine:\n    lease_seconds: ${V}\n", env("V", "7")); c.NATS.Engine.LeaseSeconds != 7 {
		t.Errorf("lease_seconds: ${V} with V=7 read %d", c.NATS.Engine.LeaseSeconds)
	}
}

// The file is read strictly with its variables expanded: a key given
// twice is refused at its second line, as an unknown key is at its own.
func TestADuplicateKeyIsRefusedAtItsLine(t *testing.T) {
	_, err := config.Parse("engine.yaml", []byte("data_dir: ${A}\nhttp: {listen: \"off\"}\ndata_dir: b\n"), env("A", "a"))
	if err == nil || !strings.HasPrefix(err.Error(), "engine.yaml line 3: ") || !strings.Contains(err.Error(), `"data_dir" already defined at line 1`) {
		t.Fatalf("a key given twice: err %v, want one at line 3", err)
	}
}

func TestErrorsNameTheKeyAndTheLine(t *testing.T) {
	cases := []struct {
		name, src, key string
		line           int
	}{
		{"UnknownTopLevelKey", "data_dir: x\nnatz: {}\n", "unknown key natz", 2},
		{"UnknownNestedKey", "nats:\n  engine:\n    rol: serve\n", "unknown key nats.engine.rol", 3},
		{"UnknownKeyInAFlowMapping", "nats: {engine: {role: serve, lease: 3}}\n", "unknown key nats.engine.lease", 1},
		{"UnknownKeyInAServiceBlock", "services:\n  keyvalue:\n    adaptr: sqlite\n", "unknown key services.keyvalue.adaptr", 3},
		{"UnknownKeyInASecretList", "services:\n  secret:\n    - {adapter: env}\n    - {adapter: dotenv, pth: x}\n", "unknown key services.secret[1].pth", 4},
		{"WrongType", "nats:\n  engine:\n    lease_seconds: soon\n", "nats.engine.lease_seconds", 3},
		{"ServiceNotAMapping", "services:\n  keyvalue: sqlite\n", "services.keyvalue", 2},
		{"ServiceConfigNotAMapping", "services:\n  keyvalue: {adapter: sqlite, config: x.db}\n", "services.keyvalue.config", 2},
		{"Role", "nats:\n  engine:\n    role: boss\n", "nats.engine.role", 3},
		{"RolloutID", "nats:\n  engine:\n    rollout_id: \"bad id\"\n", "nats.engine.rollout_id", 3},
		{"LeaseTooShort", "nats:\n  engine:\n    lease_seconds: 0\n", "nats.engine.lease_seconds", 3},
		{"LeaseTooLong", "nats:\n  engine: {lease_seconds: 301}\n", "nats.engine.lease_seconds", 2},
		{"StandbyTimeout", "nats:\n  engine:\n\n    standby_timeout_seconds: 0\n", "nats.engine.standby_timeout_seconds", 4},
		{"Drain", "nats:\n  engine:\n    drain_seconds: -1\n", "nats.engine.drain_seconds", 3},
		{"BucketReplicas", "nats:\n  engine:\n    bucket_replicas: 2\n", "nats.engine.bucket_replicas", 3},
		{"EmptyNATSURL", "nats:\n  url: \"\"\n", "nats.url", 2},
		{"NATSURLScheme", "nats:\n  url: http://127.0.0.1:4222\n", "nats.url", 2},
		{"TwoCredentials", "nats:\n  credentials:\n    creds_file: a.creds\n    token: t\n", "nats.credentials.token", 4},
		{"PasswordWithoutUser", "nats:\n  credentials:\n    password: p\n", "nats.credentials.password", 3},
		{"TLSCertWithoutKey", "nats:\n  credentials:\n    tls: {cert: c.pem}\n", "nats.credentials.tls.cert", 3},
		{"HTTPListen", "http:\n  listen: localhost\n", "http.listen", 2},
		{"HTTPPort", "http:\n  listen: \"localhost:99999\"\n", "http.listen", 2},
		{"DataDir", "data_dir: \"\"\n", "data_dir", 1},
		{"MissingAdapter", "services:\n  document: {config: {path: d.sqlite}}\n", "services.document", 2},
		{"UnknownAdapter", "services:\n  document:\n    adapter: mongo\n", "services.document.adapter", 3},
		{"TheOldCustomForm", "services:\n  keyvalue:\n    adapter: custom\n    name: redis\n", "services.keyvalue.name", 4},
		{"CacheTierOnAServiceThatIsOff", "services:\n  object_storage: {adapter: off}\n  cache:\n    adapter: object_storage\n", "services.cache.adapter", 4},
		{"SecretOffAmongOthers", "services:\n  secret:\n    - {adapter: env}\n    - {adapter: off}\n", "services.secret[1].adapter", 4},
		{"UnknownSecretAdapter", "services:\n  secret: {adapter: keyring}\n", "services.secret[0].adapter", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("engine.yaml", []byte(tc.src), env())
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tc.src)
			}
			if !errors.Is(err, domain.ErrInvalidConfig) {
				t.Errorf("err %v does not match domain.ErrInvalidConfig", err)
			}
			if line := fmt.Sprintf("engine.yaml line %d: ", tc.line); !strings.HasPrefix(err.Error(), line) {
				t.Errorf("err %q does not start with %q", err, line)
			}
			if !strings.Contains(err.Error(), tc.key) {
				t.Errorf("err %q does not name %s", err, tc.key)
			}
		})
	}
}

// A standby takes over from a holder that died only after a whole lease
// of silence. One that gives up no later than that never takes over, nor
// does its restart: after a crash of the old release no engine serves.
func TestAStandbyTimeoutNoLongerThanTheLeaseIsRefused(t *testing.T) {
	for _, standby := range []int{3, 4} {
		src := fmt.Sprintf("nats:\n  engine:\n    lease_seconds: 4\n    standby_timeout_seconds: %d\n", standby)
		_, err := config.Parse("engine.yaml", []byte(src), env())
		want := fmt.Sprintf("engine.yaml line 4: nats.engine.standby_timeout_seconds: is %d, want more than nats.engine.lease_seconds (4)", standby)
		if err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, domain.ErrInvalidConfig) {
			t.Errorf("standby_timeout_seconds %d with lease_seconds 4: err %v, want %q", standby, err, want)
		}
	}
	parse(t, "nats:\n  engine: {lease_seconds: 4, standby_timeout_seconds: 5}\n", env())
}

// The periods are multiplied into time.Durations: a value far out of
// range must be refused, not wrapped around into a valid lease (2^55+20
// seconds is 20 s once multiplied) or a stop budget already spent (a
// drain that, with the lease added, overflows).
func TestAPeriodThatWouldWrapAroundIsRefused(t *testing.T) {
	for _, tc := range []struct{ key, value string }{
		{"lease_seconds", "36028797018963988"},           // 2^55 + 20
		{"lease_seconds", "-36028797018963948"},          // -2^55 + 20
		{"standby_timeout_seconds", "36028797018964868"}, // 2^55 + 900
		{"drain_seconds", "9223372036"},
	} {
		src := fmt.Sprintf("nats:\n  engine:\n    %s: %s\n", tc.key, tc.value)
		c, err := config.Parse("engine.yaml", []byte(src), env())
		if err != nil {
			want := fmt.Sprintf("engine.yaml line 3: nats.engine.%s: is %s, out of range", tc.key, tc.value)
			if !strings.HasPrefix(err.Error(), want) || !errors.Is(err, domain.ErrInvalidConfig) {
				t.Errorf("%s: %s: err %v, want %q", tc.key, tc.value, err, want)
			}
			continue
		}
		tm := c.Timing()
		t.Errorf("%s: %s accepted: lease %v, standby timeout %v, drain %v", tc.key, tc.value, tm.Lease, tm.StandbyTimeout, tm.Drain)
	}
}

func TestMoreThanOneDocumentIsAnError(t *testing.T) {
	_, err := config.Parse("engine.yaml", []byte("data_dir: a\n---\ndata_dir: b\n"), env())
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("two documents: err %v, want one at line 3", err)
	}
}

func TestAdapterOffSwitchesAServiceOff(t *testing.T) {
	c := parse(t, "services:\n  vector_store: {adapter: off, config: {path: left/over.sqlite}}\n  secret: {adapter: off}\n", env())
	if !c.Services.VectorStore.Off() || c.Services.KeyValue.Off() {
		t.Fatalf("vector_store off %v, keyvalue off %v", c.Services.VectorStore.Off(), c.Services.KeyValue.Off())
	}
	if len(c.Services.Secret) != 1 || !c.Services.Secret[0].Off() {
		t.Fatalf("secret: %+v, want one block that is off", c.Services.Secret)
	}
}

func TestSecretIsOneBlockOrAList(t *testing.T) {
	one := parse(t, "services:\n  secret: {adapter: dotenv, config: {path: .env}}\n", env())
	list := parse(t, "services:\n  secret:\n    - {adapter: dotenv, config: {path: .env}}\n    - adapter: env\n", env())
	empty := parse(t, "services:\n  secret: []\n", env())
	if len(one.Services.Secret) != 1 || one.Services.Secret[0].Adapter != "dotenv" {
		t.Fatalf("one block gives %+v", one.Services.Secret)
	}
	if len(list.Services.Secret) != 2 || list.Services.Secret[1].Adapter != "env" {
		t.Fatalf("a list gives %+v", list.Services.Secret)
	}
	if len(empty.Services.Secret) != 0 {
		t.Fatalf("an empty list gives %+v", empty.Services.Secret)
	}
	if got := one.Line("services.secret[0]"); got != 2 {
		t.Fatalf("a single secret block is at line %d, want 2", got)
	}
}

// vaultConfig is a secret adapter's configuration as a program outside
// this repository would declare it: its secrets say so by a tag.
type vaultConfig struct {
	Address string `yaml:"address"`
	Nested  struct {
		Token string `yaml:"token" secret:"true"`
	} `yaml:"nested"`
}

func (vaultConfig) LocalStorage() string { return "" }

func init() {
	storage.Register(ports.ServiceSecret, "vault", func(ctx context.Context, _ vaultConfig) (*secretenv.Store, error) {
		return secretenv.Open(ctx, secretenv.Config{})
	})
}

// The storage registry is the one list of adapter names: each name it
// holds loads, and a name it lacks is refused with exactly its list, so
// the two cannot drift.
func TestAdapterNamesAreTheRegistrys(t *testing.T) {
	for _, b := range config.Default().Blocks() {
		names := storage.Adapters(b.Name)
		if len(names) == 0 {
			t.Fatalf("no adapter registered for %s", b.Name)
		}
		for _, name := range names {
			src := fmt.Sprintf("services:\n  %s: {adapter: %s}\n", strings.TrimPrefix(b.Key, "services."), name)
			if b.Name == ports.ServiceSecret {
				src = fmt.Sprintf("services:\n  secret: {adapter: %s}\n", name)
			}
			if _, err := config.Parse("engine.yaml", []byte(src), env()); err != nil {
				t.Errorf("%s adapter %q is registered but does not load: %v", b.Name, name, err)
			}
		}
		src := fmt.Sprintf("services:\n  %s: {adapter: nonesuch}\n", strings.TrimPrefix(strings.TrimSuffix(b.Key, "[0]"), "services."))
		_, err := config.Parse("engine.yaml", []byte(src), env())
		if want := fmt.Sprintf("want one of %s or off", strings.Join(names, ", ")); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("an unknown %s adapter: err %v, want %q", b.Name, err, want)
		}
	}
	c := parse(t, "services:\n  secret: {adapter: vault, config: {address: \"https://vault:8200\"}}\n", env())
	if s := c.Services.Secret[0]; s.Adapter != "vault" || s.Config.Kind != yaml.MappingNode {
		t.Fatalf("a registered adapter's block: %+v", s)
	}
}

func TestMaskedHidesEverySecret(t *testing.T) {
	src := `
nats:
  url: nats://engine:natspw@nats-1:4222,nats://engine:natspw2@nats-2:4222
  credentials: {user: engine, password: userpw}
  caller_secret: callersecret-callersecret-callersecret
services:
  keyvalue: {adapter: postgres, config: {dsn: "postgres://kv:pgurlpw@db:5432/engine?sslmode=disable"}}
  document: {adapter: postgres, config: {dsn: "host=db user=doc password=pgkvpw dbname=engine"}}
  object_storage: {adapter: s3, config: {endpoint: "http://s3:7070", bucket: objects, access_key: AKIDVISIBLE, secret_key: s3secretkey}}
  vector_store: {adapter: qdrant, config: {host: qdrant, api_key: qdrantkey}}
  secret: [{adapter: vault, config: {address: "https://vault:8200", nested: {token: vaulttoken}}}]
http: {listen: "127.0.0.1:8080", token: httptoken}
`
	c := parse(t, src, env())
	out, err := c.Masked().YAML()
	if err != nil {
		t.Fatalf("YAML: %v", err)
	}
	text := string(out)
	for _, secret := range []string{"natspw", "natspw2", "userpw", "callersecret", "pgurlpw", "pgkvpw", "s3secretkey", "qdrantkey", "vaulttoken", "httptoken"} {
		if strings.Contains(text, secret) {
			t.Errorf("masked rendering shows %q:\n%s", secret, text)
		}
	}
	for _, visible := range []string{"nats-1:4222", "nats-2:4222", "user: engine", "AKIDVISIBLE", "objects", "db:5432/engine", "dbname=engine", "***"} {
		if !strings.Contains(text, visible) {
			t.Errorf("masked rendering hides %q, which is no secret:\n%s", visible, text)
		}
	}
	if c.NATS.Credentials.Password != "userpw" || c.HTTP.Token != "httptoken" {
		t.Fatalf("Masked changed the configuration it copied")
	}
	orig, err := c.YAML()
	if err != nil || !strings.Contains(string(orig), "s3secretkey") || !strings.Contains(string(orig), "vaulttoken") {
		t.Fatalf("Masked changed the original's service blocks: %v\n%s", err, orig)
	}
	// The masked caller secret is too short to be one: put a real one back
	// to check that the rest of the rendering loads.
	again := strings.Replace(text, "caller_secret: '***'", "caller_secret: "+callerSecret, 1)
	if _, err := config.Parse("masked.yaml", []byte(again), env()); err != nil {
		t.Fatalf("the masked rendering does not load again: %v\n%s", err, again)
	}
}

// An unquoted ${VAR} is trimmed as YAML trims a plain value, as it was
// when variables were pasted into the text: a secret made from a file,
// ending in a newline, reads without it, and a number with a blank after
// it is still a number. Quoted, a value is taken as it is.
func TestAnUnquotedVariableIsTrimmedAsAPlainValue(t *testing.T) {
	secret := "0123456789abcdef0123456789abcdef0123"
	c, err := config.Parse("engine.yaml", []byte("http: {listen: \"off\"}\nnats:\n  caller_secret: ${S}\n"), env("S", secret+"\n"))
	if err != nil || c.NATS.CallerSecret != secret {
		t.Errorf("caller_secret: ${S} with S ending in a newline = %q, %v; want it without", c.NATS.CallerSecret, err)
	}
	c, err = config.Parse("engine.yaml", []byte("nats:\n  engine:\n    lease_seconds: ${S}\n"), env("S", "30 "))
	if err != nil || c.NATS.Engine.LeaseSeconds != 30 {
		t.Errorf("lease_seconds: ${S} with S \"30 \" = %v, %v; want 30", c, err)
	}
	c, err = config.Parse("engine.yaml", []byte("http: {listen: \"off\"}\nnats:\n  caller_secret: \"${S}\"\n"), env("S", secret+" "))
	if err != nil || c.NATS.CallerSecret != secret+" " {
		t.Errorf("caller_secret: \"${S}\" with S ending in a blank = %q, %v; want it kept", c.NATS.CallerSecret, err)
	}
}

// http.proxy_header names the header the trusted proxies write,
// X-Forwarded-For when left out, in any case; any other value is refused
// naming the key, its line and the value.
func TestTheProxyHeaderIsXForwardedForOrForwarded(t *testing.T) {
	if fwd, err := config.Default().HTTP.UsesForwarded(); err != nil || fwd {
		t.Fatalf("the default reads Forwarded: %v (%v), want X-Forwarded-For", fwd, err)
	}
	for value, want := range map[string]bool{"x-forwarded-for": false, "X-Forwarded-For": false, "forwarded": true, "Forwarded": true} {
		c := parse(t, "http:\n  proxy_header: "+value+"\n", env())
		if fwd, err := c.HTTP.UsesForwarded(); err != nil || fwd != want {
			t.Fatalf("proxy_header: %s reads Forwarded: %v (%v), want %v", value, fwd, err, want)
		}
	}
	for _, value := range []string{`""`, "x-real-ip", "forwarded-for", "'forwarded, x-forwarded-for'"} {
		src := "http:\n  listen: 127.0.0.1:8080\n  proxy_header: " + value + "\n"
		_, err := config.Parse("engine.yaml", []byte(src), env())
		if value == `""` {
			if err != nil {
				t.Fatalf("proxy_header left empty: %v", err)
			}
			continue
		}
		if !errors.Is(err, domain.ErrInvalidConfig) {
			t.Fatalf("proxy_header: %s: err %v, want domain.ErrInvalidConfig", value, err)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "engine.yaml line 3: ") || !strings.Contains(msg, "http.proxy_header") ||
			!strings.Contains(msg, strings.Trim(value, "'")) {
			t.Fatalf("err %q does not name http.proxy_header at line 3 and %s", msg, value)
		}
	}
}

// http.max_proxy_connections is a count, 0 for the API's default; a
// negative one is refused naming the key and its line.
func TestTheProxiesMostConnectionsIsACount(t *testing.T) {
	if c := parse(t, "http:\n  max_proxy_connections: 10000\n", env()); c.HTTP.MaxProxyConnections != 10000 {
		t.Fatalf("max_proxy_connections: 10000 read as %d", c.HTTP.MaxProxyConnections)
	}
	_, err := config.Parse("engine.yaml", []byte("http:\n  max_proxy_connections: -1\n"), env())
	if !errors.Is(err, domain.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), "engine.yaml line 2: ") ||
		!strings.Contains(err.Error(), "http.max_proxy_connections") {
		t.Fatalf("max_proxy_connections: -1: err %v, want one naming the key at line 2", err)
	}
}

// http.max_connections_per_proxy is a count, 0 for the API's default; a negative one is refused naming the key and its line.
func TestTheMostConnectionsOfOneProxyIsACount(t *testing.T) {
	if c := parse(t, "http:\n  max_connections_per_proxy: 4096\n", env()); c.HTTP.MaxConnectionsPerProxy != 4096 {
		t.Fatalf("max_connections_per_proxy: 4096 read as %d", c.HTTP.MaxConnectionsPerProxy)
	}
	_, err := config.Parse("engine.yaml", []byte("http:\n  max_connections_per_proxy: -1\n"), env())
	if !errors.Is(err, domain.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), "engine.yaml line 2: ") ||
		!strings.Contains(err.Error(), "http.max_connections_per_proxy") {
		t.Fatalf("max_connections_per_proxy: -1: err %v, want one naming the key at line 2", err)
	}
}

// http.max_client_connections is a count, 0 for the API's default; a
// negative one is refused naming the key and its line.
func TestTheClientsMostConnectionsIsACount(t *testing.T) {
	if c := parse(t, "http:\n  max_client_connections: 10000\n", env()); c.HTTP.MaxClientConnections != 10000 {
		t.Fatalf("max_client_connections: 10000 read as %d", c.HTTP.MaxClientConnections)
	}
	_, err := config.Parse("engine.yaml", []byte("http:\n  max_client_connections: -1\n"), env())
	if !errors.Is(err, domain.ErrInvalidConfig) || !strings.HasPrefix(err.Error(), "engine.yaml line 2: ") ||
		!strings.Contains(err.Error(), "http.max_client_connections") {
		t.Fatalf("max_client_connections: -1: err %v, want one naming the key at line 2", err)
	}
}

// http.trusted_proxies takes CIDRs and single addresses, IPv4 and IPv6,
// and refuses anything else naming the key, its line and the entry.
func TestTrustedProxiesAreCIDRsOrAddresses(t *testing.T) {
	c := parse(t, "http:\n  trusted_proxies: [10.0.0.0/8, 192.168.1.7, \"fd00::/64\", \"fd00::7\", \"::ffff:172.16.0.0/108\", \"::ffff:172.16.0.9\"]\n", env())
	got, err := c.HTTP.Proxies()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.168.1.7/32", "fd00::/64", "fd00::7/128", "172.16.0.0/12", "172.16.0.9/32"}
	var have []string
	for _, p := range got {
		have = append(have, p.String())
	}
	if !slices.Equal(have, want) {
		t.Fatalf("trusted proxies %v, want %v", have, want)
	}
	if p, err := config.Default().HTTP.Proxies(); err != nil || len(p) != 0 {
		t.Fatalf("the default trusts %v (%v), want no proxy", p, err)
	}

	for _, tc := range []struct{ name, entry string }{
		{"Empty", `""`},
		{"AName", "proxy.internal"},
		{"AnAddressWithAPort", `"10.0.0.1:8080"`},
		{"ABadOctet", "10.0.0.256"},
		{"ABadLength", "10.0.0.0/33"},
		{"ANegativeLength", "10.0.0.0/-1"},
		{"NoLength", "10.0.0.0/"},
		{"BitsPastTheLength", "10.0.0.1/8"},
		{"IPv6BitsPastTheLength", `"fd00::1/64"`},
		{"AZone", `"fe80::1%eth0"`},
		{"ARange", "10.0.0.1-10.0.0.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "http:\n  trusted_proxies:\n    - 10.0.0.0/8\n    - " + tc.entry + "\n"
			_, err := config.Parse("engine.yaml", []byte(src), env())
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", src)
			}
			if !errors.Is(err, domain.ErrInvalidConfig) {
				t.Errorf("err %v does not match domain.ErrInvalidConfig", err)
			}
			entry := strings.Trim(tc.entry, `"`)
			if msg := err.Error(); !strings.HasPrefix(msg, "engine.yaml line 2: ") || !strings.Contains(msg, "http.trusted_proxies") ||
				!strings.Contains(msg, fmt.Sprintf("entry 1 %q", entry)) {
				t.Fatalf("err %q does not name http.trusted_proxies at line 2 and entry 1 %q", msg, entry)
			}
		})
	}
}
