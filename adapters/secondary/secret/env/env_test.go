package env_test

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/secret/env"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

var notNameChars = regexp.MustCompile(`[^A-Z0-9]+`)

func TestSecretContract(t *testing.T) {
	t.Run("env", func(t *testing.T) {
		contracttests.RunSecret(t, contracttests.SecretHarnessFunc(func(t *testing.T, secrets map[string]string) func(*testing.T) ports.Secrets {
			// A prefix of the test's own keeps parallel subtests apart;
			// t.Setenv would forbid running them in parallel.
			prefix := "ABI_TEST_" + notNameChars.ReplaceAllString(strings.ToUpper(t.Name()), "_") + "_"
			for name, value := range secrets {
				os.Setenv(prefix+name, value)
				t.Cleanup(func() { os.Unsetenv(prefix + name) })
			}
			return func(t *testing.T) ports.Secrets {
				s, err := env.Open(t.Context(), env.Config{Prefix: prefix})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return s
			}
		}))
	})
}

func TestOpen(t *testing.T) {
	if _, err := env.Open(t.Context(), env.Config{Prefix: "1BAD-"}); !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "prefix") {
		t.Fatalf("Open with a bad prefix: err %v, want ErrInvalidArgument naming prefix", err)
	}
	t.Setenv("ABI_SECRET_DEFAULT_PREFIX_CHECK", "found")
	s, err := env.Open(t.Context(), env.Config{})
	if err != nil {
		t.Fatalf("Open with the default prefix: %v", err)
	}
	if v, err := s.Get(t.Context(), "DEFAULT_PREFIX_CHECK"); err != nil || v != "found" {
		t.Fatalf("with the default prefix, Get = %q, %v; want the ABI_SECRET_ variable", v, err)
	}
	if got := (env.Config{}).LocalStorage(); got != "" {
		t.Fatalf("LocalStorage %q, want \"\": secrets are deployment configuration", got)
	}
}
