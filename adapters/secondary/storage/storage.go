// Package storage is the registry of storage adapters. For each service and
// adapter name it holds a factory that decodes the adapter's block of
// engine.yaml into that adapter's Config, fills local defaults under the
// data directory, and returns what the shared-backend check needs (a
// declaration) separately from what opens the store. So the check runs on
// declarations alone, before any file or connection exists.
//
// Built-in adapters register themselves here; other teams add theirs with
// RegisterCustom and select them in engine.yaml with
// {adapter: custom, name: <name>, shared_storage: <bool>, config: {...}}.
package storage

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

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
	// Adapter is the adapter's name, "custom" or "off".
	Adapter string
	// Name and SharedStorage are a custom block's.
	Name          string
	SharedStorage bool
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
}

// Built is one service, declared but not open.
type Built struct {
	Declaration storagepolicy.Declaration
	// Open opens the store; it is nil for a service that is off. The
	// port's type follows the service: ports.KeyValue, ports.DocumentStore,
	// ports.ObjectStorage, ports.VectorStore, ports.Cache, ports.Secrets.
	// deps holds the ports of services opened earlier, for cache tiers.
	Open func(ctx context.Context, deps map[string]any) (port any, close func() error, err error)
}

// Factory builds a service from its block. It must not touch a file or the
// network: opening is Built.Open's job.
type Factory func(b Block, env Env) (Built, error)

type key struct{ service, adapter string }

var (
	mu      sync.RWMutex
	builtin = map[key]Factory{}
	custom  = map[key]Factory{}
)

// register adds a built-in adapter; a second registration is a bug.
func register(service, adapter string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	k := key{service, adapter}
	if _, dup := builtin[k]; dup {
		panic(fmt.Sprintf("storage: %s adapter %q registered twice", service, adapter))
	}
	builtin[k] = f
}

// RegisterCustom adds an adapter for a service under a name, for blocks
// that say {adapter: custom, name: <name>}. It fails when the name is taken
// for that service.
func RegisterCustom(service, name string, f Factory) error {
	if name == "" || f == nil {
		return fmt.Errorf("register a custom %s adapter: name and factory are required: %w", service, ports.ErrInvalidArgument)
	}
	mu.Lock()
	defer mu.Unlock()
	k := key{service, name}
	if _, dup := custom[k]; dup {
		return fmt.Errorf("custom %s adapter %q is already registered: %w", service, name, ports.ErrConflict)
	}
	custom[k] = f
	return nil
}

// Adapters lists the built-in adapter names of a service, sorted.
func Adapters(service string) []string {
	mu.RLock()
	defer mu.RUnlock()
	var out []string
	for k := range builtin {
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
	env := Env{DataDir: dataDir, Built: map[string]Built{}}
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
	switch b.Adapter {
	case "off":
		return Built{Declaration: storagepolicy.Declaration{Service: b.Service, Adapter: b.Adapter, Off: true}}, nil
	case "custom":
		mu.RLock()
		f, ok := custom[key{b.Service, b.Name}]
		mu.RUnlock()
		if !ok {
			return Built{}, configError(b.Key+".name", fmt.Errorf("no custom %s adapter is registered as %q", b.Service, b.Name))
		}
		built, err := f(b, env)
		if err != nil {
			return Built{}, err
		}
		d := &built.Declaration
		d.Service, d.Adapter, d.Custom, d.SharedStorage = b.Service, b.Name, true, b.SharedStorage
		return built, nil
	}
	mu.RLock()
	f, ok := builtin[key{b.Service, b.Adapter}]
	mu.RUnlock()
	if !ok {
		return Built{}, configError(b.Key+".adapter", fmt.Errorf("%q: want one of %s, custom or off",
			b.Adapter, strings.Join(Adapters(b.Service), ", ")))
	}
	return f(b, env)
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

// Decode decodes an adapter's settings into out (a pointer to its Config)
// strictly: a key that is not one of the Config's yaml fields is an error
// naming it and its line, as for the rest of the file.
func Decode(n *yaml.Node, out any, key string) error {
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
// node without KnownFields.
func checkKeys(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode || t.Kind() != reflect.Struct {
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

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// Under is a default path under the data directory, written so it reads
// as the user wrote the directory ("./.engine/kv.sqlite").
func Under(dataDir, name string) string {
	return strings.TrimRight(dataDir, "/") + "/" + name
}

// adapter makes a factory from an adapter package's Config, a filler of
// local defaults, and its Open.
func adapter[C ports.StorageConfig, S interface{ Close() error }](fill func(c *C, dataDir string), open func(context.Context, C) (S, error)) Factory {
	return func(b Block, env Env) (Built, error) {
		var c C
		if err := Decode(b.Config, &c, b.Key+".config"); err != nil {
			return Built{}, err
		}
		if fill != nil {
			fill(&c, env.DataDir)
		}
		return Built{
			Declaration: storagepolicy.Declaration{Service: b.Service, Adapter: b.Adapter, Storage: c},
			Open: func(ctx context.Context, _ map[string]any) (any, func() error, error) {
				s, err := open(ctx, c)
				if err != nil {
					return nil, nil, err
				}
				return s, s.Close, nil
			},
		}, nil
	}
}

// defaultPath fills an empty path under the data directory.
func defaultPath(p *string, dataDir, name string) {
	if *p == "" {
		*p = Under(dataDir, name)
	}
}
