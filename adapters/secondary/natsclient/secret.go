package natsclient

import (
	"context"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// Secrets is the secret service of the serving engine. Engines serve it
// only to signed callers, so its client needs WithSigner.
type Secrets struct{ c *Client }

var _ ports.Secrets = Secrets{}

// NewSecrets calls the secret service through c.
func NewSecrets(c *Client) Secrets { return Secrets{c: c} }

func secretSubject(op string) string { return wire.Subject(ports.ServiceSecret, op) }

// Get implements ports.Secrets.
func (s Secrets) Get(ctx context.Context, name string) (string, error) {
	if err := text("name", name); err != nil {
		return "", err
	}
	var out wire.SecretValue
	if err := s.c.Call(ctx, secretSubject(wire.SecretGet), wire.SecretName{Name: name}, &out); err != nil {
		return "", err
	}
	return out.Value, nil
}

// List implements ports.Secrets.
func (s Secrets) List(ctx context.Context) ([]string, error) {
	var out wire.SecretNames
	if err := s.c.Call(ctx, secretSubject(wire.SecretList), wire.Empty{}, &out); err != nil {
		return nil, err
	}
	return out.Names, nil
}
