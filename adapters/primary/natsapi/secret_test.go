package natsapi_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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

// A get that names no secret is a malformed call, as an empty key is to
// the keyvalue service: it is refused as bad input naming the field, not
// answered "not found", which reads as a secret missing from the
// deployment. A store that holds a variable named by its prefix alone
// does not change that.
func TestASecretGetThatNamesNoSecretIsRefusedAsBadInput(t *testing.T) {
	t.Setenv("ABI_TEST_EMPTY_NAME_", "the prefix alone")
	secrets, err := env.Open(t.Context(), env.Config{Prefix: "ABI_TEST_EMPTY_NAME_"})
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
	nc := natstest.Connect(t, url)
	for _, body := range []string{``, `{}`, `{"name":""}`} {
		msg := nats.NewMsg(wire.Subject(ports.ServiceSecret, wire.SecretGet))
		msg.Header.Set(wire.AuthHeader, token)
		msg.Data = []byte(body)
		reply, err := nc.RequestMsg(msg, 10*time.Second)
		if err != nil {
			t.Fatalf("get %s: %v", body, err)
		}
		code, text := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)
		if code != "400" || !strings.Contains(text, `"name"`) || !strings.Contains(text, "empty") {
			t.Errorf("get %s = %q, code %q %q; want 400 saying field \"name\" is empty", body, reply.Data, code, text)
		}
	}
}
