package natsconn_test

import (
	"net"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/natsconn"
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
