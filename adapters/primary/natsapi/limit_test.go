package natsapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// The protocol reads a limit of 0, or none, as a page of 100; a negative
// limit means nothing, so every listing refuses it with a 400 naming the
// field rather than reading it as the default page.
func TestANegativeLimitIsABadRequestNamingTheField(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	newEngine(t, url, newObjects(t), engineOptions{},
		natsapi.KeyValue(newMemoryKV(t)), natsapi.Document(docmemory.New()))
	nc := natstest.Connect(t, url)
	if reply, err := nc.Request(wire.Subject(ports.ServiceDocument, wire.DocEnsureCollection), []byte(`{"name":"c"}`), 5*time.Second); err != nil || reply.Header.Get(wire.ErrorCodeHeader) != "" {
		t.Fatalf("ensure_collection: %v %v", err, reply.Header)
	}
	calls := []struct{ service, op, body string }{
		{ports.ServiceKeyValue, wire.KVListKeys, `{"limit":-5}`},
		{ports.ServiceKeyValue, wire.KVListKeys, `{"prefix":"a","limit":-1}`},
		{ports.ServiceDocument, wire.DocFind, `{"collection":"c","limit":-5}`},
		{ports.ServiceObjectStorage, wire.OSList, `{"limit":-5}`},
	}
	for _, c := range calls {
		reply, err := nc.Request(wire.Subject(c.service, c.op), []byte(c.body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", c.op, c.body, err)
		}
		code, msg := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)
		if code != "400" || !strings.Contains(msg, `"limit"`) {
			t.Errorf("%s.%s %s = %s %q %s, want 400 naming \"limit\"", c.service, c.op, c.body, code, msg, reply.Data)
		}
	}
}
