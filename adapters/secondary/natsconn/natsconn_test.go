package natsconn_test

import (
	"net"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/natsconn"
	"github.com/abi-engine/engine/internal/natstest"
)

func TestAConnectErrorHidesTheURLsCredentials(t *testing.T) {
	// A port that was free a moment ago: nothing answers there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	for _, c := range []struct{ url, secret string }{
		{"nats://engine:natspw@" + addr, "natspw"},
		{"nats://T0KENs3cret@" + addr, "T0KENs3cret"},
		{"nats://a:listpw@" + addr + ",nats://listtoken@" + addr, "listpw listtoken"},
		{"tls://engine:tlspw@" + addr, "tlspw"},
		{"ws://engine:wspw@" + addr, "wspw"},
	} {
		_, err := natsconn.Connect(natsconn.Options{URL: c.url, Name: "test"})
		if err == nil {
			t.Fatalf("connected to %s, where nothing listens", addr)
		}
		for _, s := range strings.Fields(c.secret) {
			if strings.Contains(err.Error(), s) {
				t.Errorf("the error shows %q: %v", s, err)
			}
		}
		if !strings.Contains(err.Error(), "***@"+addr) {
			t.Errorf("the error does not name the server: %v", err)
		}
	}
}

// A refused connection names the credentials the engine presented, so the
// operator knows which to fix. Credentials may come in nats.url
// (nats://user:password@host, nats://token@host) as well as in
// nats.credentials; and a server that wants credentials may be given none.
// Each refusal says which it was, and never shows the secret.
func TestARefusedConnectNamesTheCredentialsInTheURLOrTheirAbsence(t *testing.T) {
	d := natstest.StartDeployed(t)
	withURL := strings.Replace(d.Server.ClientURL(), "nats://", "nats://engine_a:not-the-password@", 1)
	_, err := natsconn.Connect(natsconn.Options{URL: withURL, Name: "test"})
	if err == nil {
		t.Fatal("connected with a wrong password")
	}
	if !strings.Contains(err.Error(), "nats.url") || strings.Contains(err.Error(), "no credentials") || strings.Contains(err.Error(), "not-the-password") {
		t.Errorf("a wrong password in nats.url: %v\nwant it to name the credentials of nats.url, without the password", err)
	}

	withToken := strings.Replace(d.Server.ClientURL(), "nats://", "nats://s3cret-token@", 1)
	_, err = natsconn.Connect(natsconn.Options{URL: withToken, Name: "test"})
	if err == nil {
		t.Fatal("connected with a token the server does not know")
	}
	if !strings.Contains(err.Error(), "nats.url") || strings.Contains(err.Error(), "s3cret-token") {
		t.Errorf("a wrong token in nats.url: %v\nwant it to name the token of nats.url, without the token", err)
	}

	_, err = natsconn.Connect(natsconn.Options{URL: d.Server.ClientURL(), Name: "test"})
	if err == nil {
		t.Fatal("connected without credentials to a server that wants them")
	}
	if strings.Contains(err.Error(), "refused these credentials") || !strings.Contains(err.Error(), "nats.credentials") {
		t.Errorf("no credentials at all: %v\nwant it to say none were given (nats.credentials), not that they were refused", err)
	}
}
