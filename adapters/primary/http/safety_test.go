package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
)

func TestObjectsAreServedAsDataNotAsPages(t *testing.T) {
	a := serveAPI(t, memoryServices(t), httpapi.Options{})
	cases := []struct {
		name, stored, served string
		inline               bool
	}{
		{"HTML", "text/html", "text/html", false},
		{"HTMLInCapitals", "TEXT/HTML; charset=utf-8", "TEXT/HTML; charset=utf-8", false},
		{"SVG", "image/svg+xml", "image/svg+xml", false},
		{"JavaScript", "application/javascript", "application/javascript", false},
		{"XHTML", "application/xhtml+xml", "application/xhtml+xml", false},
		{"NoType", "", "application/octet-stream", false},
		{"Malformed", "text/plain;;=", "text/plain;;=", false},
		{"PlainText", "text/plain; charset=utf-8", "text/plain; charset=utf-8", true},
		{"JSON", "application/json", "application/json", true},
		{"PNG", "image/png", "image/png", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := "/v1/objects/safety/" + c.name + "/page.html"
			header := []string{}
			if c.stored != "" {
				header = []string{"Content-Type", c.stored}
			}
			a.expect(http.StatusOK, "PUT", path, "<script>alert(1)</script>", header...)
			for _, method := range []string{"GET", "HEAD"} {
				resp, _ := a.expect(http.StatusOK, method, path, "")
				h := resp.Header
				if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Content-Type") != c.served ||
					!strings.Contains(h.Get("Content-Security-Policy"), "sandbox") {
					t.Errorf("%s: headers %v, want nosniff, a sandbox policy and type %q", method, h, c.served)
				}
				disposition := h.Get("Content-Disposition")
				if c.inline && disposition != "" {
					t.Errorf("%s: a %s object is served with %q, want inline", method, c.stored, disposition)
				}
				if !c.inline && disposition != `attachment; filename=page.html` {
					t.Errorf("%s: a %q object is served with Content-Disposition %q, want an attachment", method, c.stored, disposition)
				}
			}
		})
	}
	resp, _ := a.expect(http.StatusOK, "GET", "/status", "")
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("/status without nosniff: %v", resp.Header)
	}
}

func TestWithoutATokenTheHostMustNameTheAPI(t *testing.T) {
	a := serveAPI(t, memoryServices(t), httpapi.Options{
		Listen: "engine-1.local:8080",
		Hosts:  []string{"engine.internal", "Engine.Example:443", "[fd00::1]"},
	})
	cases := []struct {
		host string
		ok   bool
	}{
		{"", true}, // the test server's own address, an IP
		{"127.0.0.1:9999", true},
		{"[::1]:8080", true},
		{"localhost:8080", true},
		{"engine-1.local:8080", true},
		{"engine.internal", true},
		{"ENGINE.internal.:8080", true},
		{"engine.example:443", true},
		{"[fd00::1]:80", true},
		{"engine.example:8443", false},
		{"attacker.example:8080", false},
		{"attacker.example", false},
		{"localhost.attacker.example", false},
	}
	for _, c := range cases {
		resp, body := a.do("GET", "/v1/kv/k", nil, "Host", c.host)
		if c.ok && resp.StatusCode == http.StatusMisdirectedRequest {
			t.Errorf("Host %q is refused: %s", c.host, body)
		}
		if !c.ok {
			if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(errorOf(t, resp, body), "http.hosts") {
				t.Errorf("Host %q answered %d %s, want 421 naming http.hosts", c.host, resp.StatusCode, body)
			}
			// The probes answer whatever the Host: they tell nothing.
			if resp, body := a.do("GET", "/healthz", nil, "Host", c.host); resp.StatusCode != http.StatusOK {
				t.Errorf("/healthz with Host %q: %d %s", c.host, resp.StatusCode, body)
			}
		}
	}

	guarded := serveAPI(t, memoryServices(t), httpapi.Options{Token: "s3cret", Listen: "127.0.0.1:8080"})
	if resp, body := guarded.do("GET", "/v1/kv/k", nil, "Host", "attacker.example"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("with a token, any Host is left to the token: %d %s", resp.StatusCode, body)
	}
}
