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

// A condition given as null (if_version on a document put or delete,
// if_absent or if_match on an upload) is a 400 naming the field, and the
// call does nothing. The protocol gives null no meaning there; read as the
// field left out, it turned a write the caller meant as conditional into
// one that overwrites or deletes whatever is stored.
func TestAConditionGivenAsNullIsABadRequestAndWritesNothing(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	newEngine(t, url, newObjects(t), engineOptions{}, natsapi.Document(docmemory.New()))
	nc := natstest.Connect(t, url)
	checkWire(t, nc, ports.ServiceDocument, nil, []wireStep{
		{"ensure_collection", `{"name":"c"}`, `{}`, ""},
		{"put", `{"collection":"c","id":"d","data":{"n":1}}`, `{"id":"d","version":1,"data":{"n":1}}`, ""},
	})
	calls := []struct{ service, op, body, field string }{
		{ports.ServiceDocument, wire.DocPut, `{"collection":"c","id":"d","data":{"n":2},"if_version":null}`, "if_version"},
		{ports.ServiceDocument, wire.DocDelete, `{"collection":"c","id":"d","if_version":null}`, "if_version"},
		{ports.ServiceObjectStorage, wire.OSTransferOpen, `{"mode":"put","key":"o","if_absent":null}`, "if_absent"},
		{ports.ServiceObjectStorage, wire.OSTransferOpen, `{"mode":"put","key":"o","if_match":null}`, "if_match"},
	}
	for _, c := range calls {
		reply, err := nc.Request(wire.Subject(c.service, c.op), []byte(c.body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", c.op, c.body, err)
		}
		code, msg := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)
		if code != "400" || !strings.Contains(msg, `"`+c.field+`"`) {
			t.Errorf("%s.%s %s = %s %q %s, want 400 naming %q", c.service, c.op, c.body, code, msg, reply.Data, c.field)
		}
	}
	// The document is as it was: neither the put nor the delete ran.
	checkWire(t, nc, ports.ServiceDocument, nil, []wireStep{
		{"get", `{"collection":"c","id":"d"}`, `{"id":"d","version":1,"data":{"n":1}}`, ""},
	})
}
