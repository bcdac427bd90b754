package natsapi_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/secret/env"
	"github.com/abi-engine/engine/internal/callerauth"
	"github.com/abi-engine/engine/internal/logbuf"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// A 500 reaches the caller without the backend's text, which may name
// files of the engine's host; the log keeps it, under the reference the
// caller is given. A 400 keeps its text: it names the caller's argument.
func TestA500HidesItsTextFromTheCallerAndLogsIt(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	const secretPath = "/var/lib/abi/engine.db"
	logs := hostSayerLogging(t, url, func(_ context.Context, call *natsapi.Call) ([]byte, error) {
		if string(call.Data) == "bad" {
			return nil, fmt.Errorf("field \"key\": %w", ports.ErrInvalidArgument)
		}
		return nil, fmt.Errorf("put %q in %s: disk I/O error", "k", secretPath)
	})
	nc := natstest.Connect(t, url)

	_, err := ask(nc, 5*time.Second)
	var re *wire.RemoteError
	if !errors.As(err, &re) || re.Code != wire.CodeInternal {
		t.Fatalf("a failing call answered %v, want a 500", err)
	}
	if strings.Contains(re.Message, secretPath) || strings.Contains(re.Message, "disk I/O") {
		t.Fatalf("the caller reads the backend's text: %q", re.Message)
	}
	ref := logRef(re.Message)
	if !strings.Contains(re.Message, sayer) || len(ref) != 12 {
		t.Fatalf("the message %q names neither the call nor a log reference", re.Message)
	}
	requireLogged(t, logs, ref, secretPath)

	msg, err := nc.Request(sayer, []byte("bad"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get(wire.ErrorHeader); msg.Header.Get(wire.ErrorCodeHeader) != "400" || !strings.Contains(got, `field "key"`) {
		t.Fatalf("a 400 answered %s %q, want its text naming the field", msg.Header.Get(wire.ErrorCodeHeader), got)
	}
}

// An error's text may quote the caller's input, and a secret's name has no
// bound but the request's size: a get of a name of 600 KiB is a 404 whose
// text, quoting the name twice, would pass the connection's 1 MiB max
// payload. The caller must still get its 404, at once and with the text
// cut short, not wait out its timeout for an answer that never left.
func TestAnErrorQuotingAHugeNameStillReachesTheCaller(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	secret := []byte("caller-secret")
	secrets, err := env.Open(t.Context(), env.Config{})
	if err != nil {
		t.Fatal(err)
	}
	newHost(t, url, natsapi.Options{CallerSecret: secret}, natsapi.Secret(secrets))
	token, err := callerauth.Sign(secret, "module-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(wire.Subject(ports.ServiceSecret, wire.SecretGet))
	msg.Header.Set(wire.AuthHeader, token)
	msg.Data = []byte(`{"name":"` + strings.Repeat("N", 600<<10) + `"}`)
	reply, err := natstest.Connect(t, url).RequestMsg(msg, 30*time.Second)
	if err != nil {
		t.Fatalf("get of a secret with a name of 600 KiB: %v; want a 404", err)
	}
	err = wire.ErrorFromHeaders(reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader))
	var re *wire.RemoteError
	if !errors.As(err, &re) || re.Code != wire.CodeNotFound {
		t.Fatalf("get of a secret with a name of 600 KiB answered %v, want a 404", err)
	}
	if len(re.Message) > 32<<10 || !strings.HasPrefix(re.Message, `secret "NNN`) || !strings.Contains(re.Message, "bytes more") {
		t.Fatalf("the 404's text is %d bytes, starting %.40q; want it cut short, saying how much was left out", len(re.Message), re.Message)
	}
}

// A store with no room answers 507, which the caller's client reads as
// ports.ErrStorageFull, and as a 500 does, without the backend's text,
// which may name a file of the engine's host: the log keeps that, under
// the reference the caller is given. Before, it was a 500 the caller could
// not tell from any other failure.
func TestAFullStoreAnswers507WithoutItsTextAndLogsIt(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	const secretPath = "/var/lib/abi/objects/k.part"
	logs := hostSayerLogging(t, url, func(context.Context, *natsapi.Call) ([]byte, error) {
		return nil, fmt.Errorf("put %q: write %s: %w: no space left on device", "k", secretPath, ports.ErrStorageFull)
	})

	_, err := ask(natstest.Connect(t, url), 5*time.Second)
	var re *wire.RemoteError
	if !errors.As(err, &re) || re.Code != wire.CodeStorageFull || !errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("a call the store had no room for answered %v, want a 507 that is ports.ErrStorageFull", err)
	}
	if strings.Contains(re.Message, secretPath) || strings.Contains(re.Message, "no space") {
		t.Fatalf("the caller reads the backend's text: %q", re.Message)
	}
	ref := logRef(re.Message)
	if !strings.Contains(re.Message, sayer) || !strings.Contains(re.Message, "no room") || len(ref) != 12 {
		t.Fatalf("the message %q names neither the call, the want of room nor a log reference", re.Message)
	}
	requireLogged(t, logs, ref, secretPath)
}

// hostSayerLogging hosts, on the NATS server at url, the service "echo"
// whose one endpoint, "say", handle answers, and returns the log its host
// writes.
func hostSayerLogging(t *testing.T, url string, handle func(context.Context, *natsapi.Call) ([]byte, error)) *logbuf.Buffer {
	t.Helper()
	logs := &logbuf.Buffer{}
	svc := natsapi.Service{Name: "echo", Endpoints: []natsapi.Endpoint{{Name: "say", Handler: handle}}}
	newHost(t, url, natsapi.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))}, svc)
	return logs
}

// logRef is the log reference in the message of an answer that hides its
// error's text: what follows "log ref ", but for the message's last
// character.
func logRef(msg string) string {
	return msg[strings.LastIndex(msg, "log ref ")+len("log ref ") : len(msg)-1]
}

// requireLogged fails the test unless the log holds both the reference ref
// and the error's text.
func requireLogged(t *testing.T, logs *logbuf.Buffer, ref, text string) {
	t.Helper()
	if log := logs.String(); !strings.Contains(log, ref) || !strings.Contains(log, text) {
		t.Fatalf("the log lacks the reference %s or the error's text:\n%s", ref, log)
	}
}
