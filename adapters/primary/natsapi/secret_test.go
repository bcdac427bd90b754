package natsapi_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/secret/dotenv"
	"github.com/abi-engine/engine/internal/callerauth"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

func newDotenvSecrets(tb testing.TB, content string) ports.Secrets {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), ".env")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
	store, err := dotenv.Open(context.Background(), dotenv.Config{Path: path})
	if err != nil {
		tb.Fatal(err)
	}
	return store
}

func TestTheSecretWireFormat(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	secret := []byte("caller-secret")
	newHost(t, url, natsapi.Options{CallerSecret: secret},
		natsapi.Secret(newDotenvSecrets(t, "DB_PASSWORD=s3cr3t\nAPI_KEY=\"two\\nlines\"\n")))
	nc := natstest.Connect(t, url)
	checkWire(t, nc, ports.ServiceSecret, nil, []wireStep{
		{"get", `{"name":"DB_PASSWORD"}`, ``, "401"},
		{"list", ``, ``, "401"},
	})
	token, err := callerauth.Sign(secret, "module-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checkWire(t, nc, ports.ServiceSecret, nats.Header{wire.AuthHeader: {token}}, []wireStep{
		{"get", `{"name":"DB_PASSWORD"}`, `{"value":"s3cr3t"}`, ""},
		{"get", `{"name":"API_KEY"}`, `{"value":"two\nlines"}`, ""},
		{"get", `{"name":"db_password"}`, ``, "404"},
		{"get", `{"name":1}`, ``, "400"},
		{"list", ``, `{"names":["API_KEY","DB_PASSWORD"]}`, ""},
		{"list", `{"prefix":"DB"}`, ``, "400"},
	})
}

// FuzzSecretRequests runs every secret endpoint on any body, against a
// store with two secrets.
func FuzzSecretRequests(f *testing.F) {
	svc := natsapi.Secret(newDotenvSecrets(f, "DB_PASSWORD=s3cr3t\nAPI_KEY=k\n"))
	fuzzService(f, "secret", func(*testing.T) natsapi.Service { return svc }, ports.ErrInvalidArgument, ports.ErrNotFound)
}
