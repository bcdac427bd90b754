package natsapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// The ports read any limit <= 0 as the default page, and the Go facades
// up to this release sent a port's limit as it was: a negative limit is
// on the wire from every such facade whose caller asked for the default
// page. An old facade must work with a new engine (as ADR 0009 holds for
// upserts), so a negative limit on list_keys, find and object list is the
// default page of 100, with a cursor to the rest, never a 400: refused,
// every listing of those callers failed once the engine was upgraded.
func TestANegativeLimitAsOldFacadesSendItIsTheDefaultPage(t *testing.T) {
	ctx := t.Context()
	url := natstest.StartServer(t).ClientURL()
	kv, docs, objects := newMemoryKV(t), docmemory.New(), newObjects(t)
	if err := docs.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	for i := range ports.DefaultPage + 1 {
		key := fmt.Sprintf("k%03d", i)
		if err := kv.Set(ctx, key, []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := docs.Put(ctx, "c", key, map[string]any{"n": i}, ports.Cond{}); err != nil {
			t.Fatal(err)
		}
		if _, err := objects.Put(ctx, key, strings.NewReader("v"), ports.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	newEngine(t, url, objects, engineOptions{}, natsapi.KeyValue(kv), natsapi.Document(docs))
	nc := natstest.Connect(t, url)
	// The bodies exactly as the facades before this release wrote them for
	// a port call with limit -1.
	calls := []struct {
		service, op string
		body        any
		items       string
	}{
		{ports.ServiceKeyValue, wire.KVListKeys, wire.KVList{Limit: -1}, "keys"},
		{ports.ServiceDocument, wire.DocFind, wire.DocQuery{Collection: "c", Limit: -1}, "documents"},
		{ports.ServiceObjectStorage, wire.OSList, wire.OSListPage{Limit: -1}, "objects"},
	}
	for _, c := range calls {
		body, err := json.Marshal(c.body)
		if err != nil {
			t.Fatal(err)
		}
		reply, err := nc.Request(wire.Subject(c.service, c.op), body, 5*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", c.op, body, err)
		}
		if code := reply.Header.Get(wire.ErrorCodeHeader); code != "" {
			t.Errorf("%s.%s %s = %s %q, want the default page", c.service, c.op, body, code, reply.Header.Get(wire.ErrorHeader))
			continue
		}
		var page map[string]json.RawMessage
		var items []json.RawMessage
		var cursor string
		if err := json.Unmarshal(reply.Data, &page); err != nil {
			t.Fatalf("%s: %q: %v", c.op, reply.Data, err)
		}
		if err := json.Unmarshal(page[c.items], &items); err != nil {
			t.Fatalf("%s: %q: %v", c.op, reply.Data, err)
		}
		if err := json.Unmarshal(page["cursor"], &cursor); err != nil {
			t.Fatalf("%s: %q: %v", c.op, reply.Data, err)
		}
		if len(items) != ports.DefaultPage || cursor == "" {
			t.Errorf("%s.%s %s answered %d %s and cursor %q, want %d and a cursor to the rest",
				c.service, c.op, body, len(items), c.items, cursor, ports.DefaultPage)
		}
	}
}
