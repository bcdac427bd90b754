package natsclient_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/adapters/secondary/secret/dotenv"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/callerauth"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// serveSigned is serve on a host that requires caller tokens, the only
// kind that serves secrets; its clients sign with the same secret.
func serveSigned(t *testing.T, secret []byte, services ...natsapi.Service) (caller func(t *testing.T) *nats.Conn, client func(t *testing.T) *natsclient.Client) {
	t.Helper()
	url, caller := broker(t)
	host, err := natsapi.NewHost(natsapi.Options{
		Owner:        domain.NewInstanceID(),
		Connect:      func() (*nats.Conn, error) { return nats.Connect(url) },
		Replies:      natstest.Connect(t, url),
		CallerSecret: secret,
	}, services...)
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop)
	return caller, func(t *testing.T) *natsclient.Client {
		return natsclient.New(caller(t), natsclient.WithSigner(callerauth.NewSigner(secret, "module-a")))
	}
}

// dotenvQuote writes a value in double quotes with the escapes dotenv reads.
var dotenvQuote = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`, "$", `\$`)

func openDotenv(t *testing.T, secrets map[string]string) *dotenv.Store {
	t.Helper()
	var b strings.Builder
	for name, value := range secrets {
		fmt.Fprintf(&b, "%s=\"%s\"\n", name, dotenvQuote.Replace(value))
	}
	path := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := dotenv.Open(t.Context(), dotenv.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// The facade passes the same contract as a local store: signed facade,
// broker, endpoint behind caller tokens, dotenv adapter.
func TestSecretContract(t *testing.T) {
	t.Run("nats", func(t *testing.T) {
		contracttests.RunSecret(t, contracttests.SecretHarnessFunc(func(t *testing.T, secrets map[string]string) func(*testing.T) ports.Secrets {
			_, client := serveSigned(t, []byte("caller-secret"), natsapi.Secret(openDotenv(t, secrets)))
			return func(t *testing.T) ports.Secrets { return natsclient.NewSecrets(client(t)) }
		}))
	})
}

func TestSecretsNeedASignedCaller(t *testing.T) {
	caller, _ := serveSigned(t, []byte("caller-secret"), natsapi.Secret(openDotenv(t, map[string]string{"DB_PASSWORD": "s3cr3t"})))
	for name, c := range map[string]*natsclient.Client{
		"unsigned": natsclient.New(caller(t)),
		"forged":   natsclient.New(caller(t), natsclient.WithSigner(callerauth.NewSigner([]byte("guess"), "module-a"))),
	} {
		v, err := natsclient.NewSecrets(c).Get(t.Context(), "DB_PASSWORD")
		if !errors.Is(err, wire.ErrUnauthorized) || v != "" {
			t.Errorf("%s caller: Get = %q, %v; want 401", name, v, err)
		}
	}
}

// Calls share one overflow header between them; a signed call's token
// goes into a copy, so it never reaches a call of a client that does not
// sign.
func TestASignedCallLendsItsTokenToNoOtherCall(t *testing.T) {
	store, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	caller, client := serveSigned(t, []byte("caller-secret"), natsapi.KeyValue(store))
	signed, unsigned := natsclient.NewKeyValue(client(t)), natsclient.NewKeyValue(natsclient.New(caller(t)))
	if err := signed.Set(t.Context(), "k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	if v, err := signed.Get(t.Context(), "k"); err != nil || string(v) != "v" {
		t.Fatalf("signed Get = %q, %v; want v", v, err)
	}
	if v, err := unsigned.Get(t.Context(), "k"); !errors.Is(err, wire.ErrUnauthorized) {
		t.Fatalf("unsigned Get after a signed one = %q, %v; want 401", v, err)
	}
}
