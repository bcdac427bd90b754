// Package storage is the registry of storage adapters. Every adapter, built
// in or not, registers under a service and a name with its configuration
// type, the way database/sql drivers do:
//
//	storage.Register(ports.ServiceKeyValue, "redis", redis.Open)
//
// and a block {adapter: redis, config: {...}} under services.keyvalue of
// engine.yaml selects it. The registry decodes the block's config strictly
// into the adapter's Config, fills defaults under the data directory, and
// returns what the shared-backend check needs (a declaration) separately
// from what opens the store, so the check runs on declarations alone,
// before any file or connection exists. It also masks the Config's fields
// tagged secret:"true" when the configuration is shown.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"gopkg.in/yaml.v3"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storagepolicy"
)

// Block is one service block of the configuration.
type Block struct {
	// Service is the service's name, ports.ServiceKeyValue and the like.
	Service string
	// Key is the block's place in the file, "services.keyvalue", for
	// error messages.
	Key string
	// Adapter is the adapter's registered name, or "off".
	Adapter string
	// Config is the adapter's own settings; nil or empty means none.
	Config *yaml.Node
}

// Env is what a factory gets besides its block.
type Env struct {
	// DataDir is where local adapters keep their files by default.
	DataDir string
	// Built holds the services built before this one, by service name, so
	// a cache tier can say where the service it uses keeps its data.
	Built map[string]Built
	// NATS dials a connection of its own for an adapter that keeps its
	// data on the NATS servers; name says what for. Nil when the caller
	// has no broker: such adapters then fail to open, saying so.
	NATS func(name string) (*nats.Conn, error)
	// Logger is the log of the engine that opens the stores, which names
	// the engine on every line; it goes to every adapter whose Config
	// takes one (LoggerSetter). Nil leaves theirs unset.
	Logger *slog.Logger
}

// Built is one service, declared but not open.
type Built struct {
	Declaration storagepolicy.Declaration
	// Open opens the store; it is nil for a service that is off. The
	// port's type follows the service: ports.KeyValue, ports.DocumentStore,
	// ports.ObjectStorage, ports.VectorStore, ports.Cache, ports.Secrets.
	// deps holds the ports of services opened earlier, for cache tiers.
	Open func(ctx context.Context, deps map[string]any) (port any, close func() error, err error)
	// Reserve, when set, keeps the store for the one that is to open it,
	// from before that one opens anything at all, where what built it
	// lets one user at a time have it: it fails while another has it,
	// and release gives it back. Who the user is, ctx tells, as it tells
	// Open. Nil: nothing to reserve.
	Reserve func(ctx context.Context) (release func(), err error)
}

// Defaulter is implemented by an adapter's *Config that fills in settings
// a block left out, such as a file under the engine's data directory. The
// registry calls it after decoding and before the shared-backend check, so
// the check judges the path the adapter will use.
type Defaulter interface {
	Default(dataDir string)
}

// Checker is implemented by an adapter's Config that can tell from its
// settings alone that the store cannot open: a setting it needs is empty
// or malformed (a DSN, a bucket, a host, a file). The registry calls it
// after Default, so `engine config check` and the engine's start refuse
// the block before anything opens, rather than once the engine holds the
// lease or stands by. prefix is the block's config key, such as
// "services.keyvalue.config", for the error to name the setting by.
type Checker interface {
	Check(prefix string) error
}

// LoggerSetter is implemented by an adapter's *Config that takes the
// logger its store logs on, for what it cannot return as an error: a
// warning an operator must hear, a panic recovered on a goroutine of its
// own. The registry calls it after decoding, with the engine's logger
// (Env.Logger), so those lines name the engine as its own do. A Config
// whose logger stays nil, opened without an engine, logs on
// slog.Default().
type LoggerSetter interface {
	SetLogger(log *slog.Logger)
}

// Off is the adapter name that switches a service off: the engine neither
// owns nor serves it. No adapter may register under it.
const Off = "off"

// factory builds a service from its block. It must not touch a file or
// the network: opening is Built.Open's job.
type factory func(b Block, env Env) (Built, error)

type key struct{ service, adapter string }

// entry is one registered adapter.
type entry struct {
	build factory
	// config is the adapter's Config type, for masking its secrets.
	config reflect.Type
}

var (
	mu       sync.RWMutex
	registry = map[key]entry{}
)

// portTypes is the port an adapter of each service must implement.
var portTypes = map[string]reflect.Type{
	ports.ServiceKeyValue:      reflect.TypeFor[ports.KeyValue](),
	ports.ServiceDocument:      reflect.TypeFor[ports.DocumentStore](),
	ports.ServiceObjectStorage: reflect.TypeFor[ports.ObjectStorage](),
	ports.ServiceVectorStore:   reflect.TypeFor[ports.VectorStore](),
	ports.ServiceCache:         reflect.TypeFor[ports.Cache](),
	ports.ServiceSecret:        reflect.TypeFor[ports.Secrets](),
}

// Register adds a storage adapter of service (ports.ServiceKeyValue and the
// like) under name, so that engine.yaml selects it with
// services.<service>: {adapter: <name>, config: {...}}.
//
// C is the adapter's configuration, a struct: the block's config decodes
// into it strictly (yaml tags in snake_case name the keys; an unknown key
// is an error naming it and its line), *C fills defaults if it implements
// Defaulter, C refuses settings it cannot open with if it implements
// Checker, C.LocalStorage answers the shared-backend check, and fields
// tagged secret:"true" are masked wherever the configuration is shown.
// open opens the store; what it returns must implement the service's port
// and is closed when the engine stops. An open that returns no store (nil)
// and no error fails the engine's start, naming the adapter.
//
// Register is meant for init functions and main, before the configuration
// is loaded. Like sql.Register, it panics when the service is unknown, the
// name is empty, "off" or taken, C is not a struct, or S does not
// implement the port: each is a mistake in the program, not in its input.
func Register[C ports.StorageConfig, S io.Closer](service, name string, open func(ctx context.Context, c C) (S, error)) {
	if open == nil {
		panic(fmt.Sprintf("storage: Register %s adapter %q: open is nil", service, name))
	}
	port, ok := portTypes[service]
	if !ok {
		panic(fmt.Sprintf("storage: Register %s adapter %q: no such service; want one of %s", service, name, strings.Join(services(), ", ")))
	}
	if s := reflect.TypeFor[S](); !s.Implements(port) {
		panic(fmt.Sprintf("storage: Register %s adapter %q: %v does not implement %v", service, name, s, port))
	}
	register(service, name, reflect.TypeFor[C](), func(b Block, env Env) (Built, error) {
		c, err := decodeConfig[C](b, env)
		if err != nil {
			return Built{}, err
		}
		return Built{
			Declaration: storagepolicy.Declaration{Service: b.Service, Adapter: b.Adapter, Storage: c},
			Open: func(ctx context.Context, _ map[string]any) (any, func() error, error) {
				s, err := open(ctx, c)
				if err != nil {
					return nil, nil, err
				}
				if isNil(s) {
					return nil, nil, errors.New("the adapter's Open returned no store and no error")
				}
				return s, s.Close, nil
			},
		}, nil
	})
}

// isNil reports whether v, what an adapter's Open returned, is no store: a
// nil interface or a nil pointer, whose first call, or Close, would panic.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return r.IsNil()
	}
	return false
}

// register adds an adapter's factory; Register and the cache tiers use it.
func register(service, name string, config reflect.Type, f factory) {
	if name == "" || name == Off {
		panic(fmt.Sprintf("storage: Register %s adapter %q: the name is empty or reserved", service, name))
	}
	if config.Kind() != reflect.Struct {
		panic(fmt.Sprintf("storage: Register %s adapter %q: its configuration %v is not a struct", service, name, config))
	}
	mu.Lock()
	defer mu.Unlock()
	k := key{service, name}
	if _, dup := registry[k]; dup {
		panic(fmt.Sprintf("storage: Register %s adapter %q: registered twice", service, name))
	}
	registry[k] = entry{build: f, config: config}
}

// decodeConfig decodes a block's config into a fresh C, gives it the
// engine's logger (LoggerSetter), fills its defaults and checks it
// (Checker).
func decodeConfig[C any](b Block, env Env) (C, error) {
	var c C
	if err := decode(b.Config, &c, b.Key+".config"); err != nil {
		return c, err
	}
	if l, ok := any(&c).(LoggerSetter); ok && env.Logger != nil {
		l.SetLogger(env.Logger)
	}
	if d, ok := any(&c).(Defaulter); ok {
		d.Default(env.DataDir)
	}
	if ch, ok := any(c).(Checker); ok {
		if err := ch.Check(b.Key + ".config"); err != nil {
			return c, configError(b.Key+".config", err)
		}
	}
	return c, nil
}

// services lists the service names, sorted.
func services() []string {
	out := make([]string, 0, len(portTypes))
	for s := range portTypes {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Adapters lists the registered adapter names of a service, sorted: the
// names engine.yaml accepts for it besides "off".
func Adapters(service string) []string {
	mu.RLock()
	defer mu.RUnlock()
	var out []string
	for k := range registry {
		if k.service == service {
			out = append(out, k.adapter)
		}
	}
	slices.Sort(out)
	return out
}

// Build builds every block in order, without opening anything. Blocks of
// the same service (secret sources) may repeat.
func Build(blocks []Block, dataDir string) ([]Built, error) {
	return BuildEnv(blocks, Env{DataDir: dataDir})
}

// BuildEnv is Build with the whole environment, a NATS dialer included.
func BuildEnv(blocks []Block, env Env) ([]Built, error) {
	env.Built = map[string]Built{}
	out := make([]Built, 0, len(blocks))
	for _, b := range blocks {
		built, err := BuildOne(b, env)
		if err != nil {
			return nil, err
		}
		if _, seen := env.Built[b.Service]; !seen {
			env.Built[b.Service] = built
		}
		out = append(out, built)
	}
	return out, nil
}

// BuildOne builds one block.
func BuildOne(b Block, env Env) (Built, error) {
	if b.Adapter == Off {
		return Built{Declaration: storagepolicy.Declaration{Service: b.Service, Adapter: b.Adapter, Off: true}}, nil
	}
	mu.RLock()
	e, ok := registry[key{b.Service, b.Adapter}]
	mu.RUnlock()
	if !ok {
		return Built{}, configError(b.Key+".adapter", fmt.Errorf("%q: want one of %s or off",
			b.Adapter, strings.Join(Adapters(b.Service), ", ")))
	}
	return e.build(b, env)
}

// Declarations are what storagepolicy.Check reads.
func Declarations(built []Built) []storagepolicy.Declaration {
	out := make([]storagepolicy.Declaration, len(built))
	for i, b := range built {
		out[i] = b.Declaration
	}
	return out
}

// Opened is one open service.
type Opened struct {
	Service string
	Port    any
	close   func() error
}

// Open opens the services in order, skipping those that are off. On an
// error it closes what it opened.
func Open(ctx context.Context, built []Built) ([]Opened, error) {
	deps := map[string]any{}
	var out []Opened
	for _, b := range built {
		if b.Open == nil {
			continue
		}
		port, closeFn, err := b.Open(ctx, deps)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("open %s (%s): %w", b.Declaration.Service, b.Declaration.Adapter, err), Close(out))
		}
		if _, seen := deps[b.Declaration.Service]; !seen {
			deps[b.Declaration.Service] = port
		}
		out = append(out, Opened{Service: b.Declaration.Service, Port: port, close: closeFn})
	}
	return out, nil
}

// Close closes opened services in reverse order.
func Close(opened []Opened) error {
	var errs []error
	for _, o := range slices.Backward(opened) {
		if o.close != nil {
			if err := o.close(); err != nil {
				errs = append(errs, fmt.Errorf("close %s: %w", o.Service, err))
			}
		}
	}
	return errors.Join(errs...)
}

// configError is a bad setting, named by its key.
func configError(key string, err error) error {
	return fmt.Errorf("%w: %s: %w", domain.ErrInvalidConfig, key, err)
}

// decode decodes an adapter's settings into out (a pointer to its Config)
// strictly: a key that is not one of the Config's yaml fields is an error
// naming it and its line, as for the rest of the file.
func decode(n *yaml.Node, out any, key string) error {
	if n == nil || n.IsZero() || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if err := checkKeys(n, reflect.TypeOf(out).Elem(), key); err != nil {
		return err
	}
	if err := n.Decode(out); err != nil {
		return configError(key, err)
	}
	return nil
}

// checkKeys walks mappings against struct types, since yaml.v3 decodes a
// node without KnownFields. It walks into the elements of lists and the
// values of maps too, so a block in a list of servers is as strict as one
// at the top.
func checkKeys(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch {
	case n.Kind == yaml.SequenceNode && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for i, e := range n.Content {
			if err := checkKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := checkKeys(n.Content[i+1], t.Elem(), path+"."+n.Content[i].Value); err != nil {
				return err
			}
		}
		return nil
	case n.Kind != yaml.MappingNode || t.Kind() != reflect.Struct:
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		f, ok := fieldByTag(t, k.Value)
		if !ok {
			return fmt.Errorf("%w: line %d: unknown key %s.%s", domain.ErrInvalidConfig, k.Line, path, k.Value)
		}
		if err := checkKeys(n.Content[i+1], f.Type, path+"."+k.Value); err != nil {
			return err
		}
	}
	return nil
}

// fieldByTag finds the field of struct t that yaml.v3 decodes the key name
// into, looking into inlined structs as yaml.v3 does; an inlined map takes
// every key no field takes. A key an inlined field tagged secret takes is
// secret, whatever the tags of the inlined struct's own fields.
func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	var rest *reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" {
			continue
		}
		if slices.Contains(strings.Split(opts, ","), "inline") {
			in := f.Type
			for in.Kind() == reflect.Pointer {
				in = in.Elem()
			}
			secret := f.Tag.Get("secret") == "true"
			switch in.Kind() {
			case reflect.Struct:
				if g, ok := fieldByTag(in, name); ok {
					if secret {
						g.Tag = `secret:"true" ` + g.Tag
					}
					return g, true
				}
			case reflect.Map:
				rest = &reflect.StructField{Name: name, Type: in.Elem()}
				if secret {
					rest.Tag = `secret:"true"`
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		if tag == name {
			return f, true
		}
	}
	if rest != nil {
		return *rest, true
	}
	return reflect.StructField{}, false
}

// Masked is what a secret's value shows as in displayed configuration.
const Masked = "***"

// MaskSecrets replaces, in n (the block's config, which the caller owns),
// the value of every field the adapter's Config tags secret:"true", at any
// depth. A block of an unknown adapter is left as it is: loading it fails
// anyway.
func MaskSecrets(service, adapter string, n *yaml.Node) {
	mu.RLock()
	e, ok := registry[key{service, adapter}]
	mu.RUnlock()
	if ok {
		maskFields(n, e.config)
	}
}

func maskFields(n *yaml.Node, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	switch {
	case n.Kind == yaml.SequenceNode && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for _, e := range n.Content {
			maskFields(e, t.Elem())
		}
		return
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			maskFields(n.Content[i+1], t.Elem())
		}
		return
	case n.Kind != yaml.MappingNode || t.Kind() != reflect.Struct:
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		f, ok := fieldByTag(t, n.Content[i].Value)
		if !ok {
			continue
		}
		v := n.Content[i+1]
		if f.Tag.Get("secret") == "true" {
			// A secret is masked whole, whatever its shape: a list of
			// tokens, a map of keys, or an alias of a value set elsewhere.
			if !isEmpty(v) {
				*v = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Masked, Line: v.Line, Column: v.Column}
			}
			continue
		}
		maskFields(v, f.Type)
	}
}

// isEmpty reports whether a setting holds nothing to hide: null, an empty
// string, or an empty list or map.
func isEmpty(v *yaml.Node) bool {
	switch v.Kind {
	case yaml.ScalarNode:
		return v.Value == "" || v.ShortTag() == "!!null"
	case yaml.SequenceNode, yaml.MappingNode:
		return len(v.Content) == 0
	}
	return false
}
