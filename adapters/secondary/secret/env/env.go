// Package env reads secrets from environment variables that share a
// prefix: with the prefix ABI_SECRET_, the secret DB_PASSWORD is the
// variable ABI_SECRET_DB_PASSWORD. The environment is read at each call, so
// the store holds no copy of the secrets.
package env

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/abi-engine/engine/ports"
)

// DefaultPrefix is used when the config names no prefix.
const DefaultPrefix = "ABI_SECRET_"

var validPrefix = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Config is the env adapter's block under services.secret.config.
type Config struct {
	// Prefix starts the name of every secret variable; DefaultPrefix when
	// empty.
	Prefix string `yaml:"prefix"`
}

// LocalStorage implements ports.StorageConfig: secrets are deployment
// configuration, the same for every engine of a deploy, so they never
// count as data kept on one host.
func (Config) LocalStorage() string { return "" }

// Store reads secrets from the process environment.
type Store struct {
	prefix string
}

var _ ports.Secrets = (*Store)(nil)

// Open checks the config.
func Open(_ context.Context, c Config) (*Store, error) {
	prefix := c.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !validPrefix.MatchString(prefix) {
		return nil, fmt.Errorf("secret.config.prefix %q is not a variable name prefix ([A-Za-z_][A-Za-z0-9_]*): %w", prefix, ports.ErrInvalidArgument)
	}
	return &Store{prefix: prefix}, nil
}

// Close releases nothing.
func (s *Store) Close() error { return nil }

// Get implements ports.Secrets.
func (s *Store) Get(_ context.Context, name string) (string, error) {
	// The variable named by the prefix alone is no secret.
	if name == "" {
		return "", fmt.Errorf("%w: a secret's name is empty", ports.ErrInvalidArgument)
	}
	if v, ok := os.LookupEnv(s.prefix + name); ok {
		return v, nil
	}
	return "", fmt.Errorf("secret %q (variable %s%s): %w", name, s.prefix, name, ports.ErrNotFound)
}

// List implements ports.Secrets.
func (s *Store) List(_ context.Context) ([]string, error) {
	names := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if name, ok := strings.CutPrefix(k, s.prefix); ok && name != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}
