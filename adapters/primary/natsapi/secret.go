package natsapi

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// Secret serves a ports.Secrets as the secret service. Serve it only on a
// host that requires caller tokens: without them anyone on the NATS
// account could read every secret.
func Secret(s ports.Secrets) Service {
	return Service{
		Name:        ports.ServiceSecret,
		Description: "abi-engine secrets, for signed callers",
		Endpoints: []Endpoint{
			{Name: wire.SecretGet, Handler: JSON(func(ctx context.Context, r wire.SecretName) (wire.SecretValue, error) {
				// Refused here, whatever the store: "not found" would
				// read as a secret missing from the deployment.
				if r.Name == "" {
					return wire.SecretValue{}, fmt.Errorf("%w: field \"name\" is empty: name the secret to get", ports.ErrInvalidArgument)
				}
				v, err := s.Get(ctx, r.Name)
				if err != nil {
					return wire.SecretValue{}, err
				}
				// JSON would hand the caller U+FFFD in place of the bytes: another secret.
				if !utf8.ValidString(v) {
					return wire.SecretValue{}, fmt.Errorf("secret %q is not UTF-8 text and cannot be sent", r.Name)
				}
				return wire.SecretValue{Value: v}, nil
			})},
			{Name: wire.SecretList, Handler: JSON(func(ctx context.Context, _ wire.Empty) (wire.SecretNames, error) {
				names, err := s.List(ctx)
				// A name that is not UTF-8 (an environment variable's may
				// not be) would reach the caller with U+FFFD in place of its
				// bytes, a name that is no secret's; and no get can ask for
				// it, since requests are UTF-8. It is left out.
				sendable := []string{}
				for _, name := range names {
					if utf8.ValidString(name) {
						sendable = append(sendable, name)
					}
				}
				return wire.SecretNames{Names: sendable}, err
			})},
		},
	}
}
