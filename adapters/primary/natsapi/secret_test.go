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
	"github.com/abi-engine/engine/adapters/secondary/secret/env"
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

// An environment variable's name may hold bytes that are not UTF-8. A
// list must not hand such a name to its caller: JSON would send U+FFFD in
// its place, a name that is no secret's, and no get can ask for the real
// one, since requests are UTF-8. The names that can be asked for are
// listed, and each of them gets its value.
func TestASecretListLeavesOutNamesNoGetCanAskFor(t *testing.T) {
	const prefix = "ABI_TEST_LIST_UTF8_"
	t.Setenv(prefix+"API_KEY", "k")
	t.Setenv(prefix+"BAD_\xff", "unreachable")
	secrets, err := env.Open(t.Context(), env.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	url := natstest.StartServer(t).ClientURL()
	secret := []byte("caller-secret")
	newHost(t, url, natsapi.Options{CallerSecret: secret}, natsapi.Secret(secrets))
	token, err := callerauth.Sign(secret, "module-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checkWire(t, natstest.Connect(t, url), ports.ServiceSecret, nats.Header{wire.AuthHeader: {token}}, []wireStep{
		{"list", ``, `{"names":["API_KEY"]}`, ""},
		{"get", `{"name":"API_KEY"}`, `{"value":"k"}`, ""},
		{"get", `{"name":"BAD_\ufffd"}`, ``, "404"},
	})
}
