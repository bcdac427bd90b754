package natsapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// wireStep is one raw call and the exact answer it must get: the body when
// code is "", else only the error code.
type wireStep struct{ op, body, want, code string }

// checkWire sends each step to the service as plain NATS requests, as a
// client in another language would.
func checkWire(t *testing.T, nc *nats.Conn, service string, header nats.Header, steps []wireStep) {
	t.Helper()
	for _, s := range steps {
		msg := nats.NewMsg(wire.Subject(service, s.op))
		msg.Data = []byte(s.body)
		for k, v := range header {
			msg.Header[k] = v
		}
		reply, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", s.op, s.body, err)
		}
		got, code := string(reply.Data), reply.Header.Get(wire.ErrorCodeHeader)
		if code != s.code || (s.code == "" && got != s.want) {
			t.Fatalf("%s %s = %s (code %q %s), want %s (code %q)", s.op, s.body, got, code, reply.Header.Get(wire.ErrorHeader), s.want, s.code)
		}
	}
}

// fuzzService feeds any body to every endpoint of a fresh service: none may
// panic, and anything refused must be one of the allowed errors.
func fuzzService(f *testing.F, seeds string, fresh func(t *testing.T) natsapi.Service, allowed ...error) {
	paths, _ := filepath.Glob(filepath.Join("testdata", seeds, "*.json"))
	if len(paths) == 0 {
		f.Fatalf("no seeds under testdata/%s", seeds)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ep := range fresh(t).Endpoints {
			_, err := ep.Handler(context.Background(), &natsapi.Call{Data: body})
			if err == nil {
				continue
			}
			ok := false
			for _, a := range allowed {
				ok = ok || errors.Is(err, a)
			}
			if !ok {
				t.Fatalf("%s(%q): unexpected error %v", ep.Name, body, err)
			}
		}
	})
}

func TestTheDocumentWireFormat(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	newHost(t, url, natsapi.Options{}, natsapi.Document(docmemory.New()))
	checkWire(t, natstest.Connect(t, url), ports.ServiceDocument, nil, []wireStep{
		{"ensure_collection", `{"name":"c"}`, `{}`, ""},
		{"collections", ``, `{"collections":["c"]}`, ""},
		{"put", `{"collection":"c","id":"d","data":{"s":"x","n":1},"if_version":0}`, `{"id":"d","version":1,"data":{"n":1,"s":"x"}}`, ""},
		{"put", `{"collection":"c","id":"d","data":{},"if_version":0}`, ``, "409"},
		{"put", `{"collection":"c","id":"d","data":{"s":"y","n":2.5},"if_version":1}`, `{"id":"d","version":2,"data":{"n":2.5,"s":"y"}}`, ""},
		// Versions are store-wide on this adapter: e's first is 3.
		{"put", `{"collection":"c","id":"e"}`, `{"id":"e","version":3,"data":{}}`, ""},
		{"get", `{"collection":"c","id":"d"}`, `{"id":"d","version":2,"data":{"n":2.5,"s":"y"}}`, ""},
		{"get", `{"collection":"c","id":"nope"}`, ``, "404"},
		{"get", `{"collection":"nope","id":"d"}`, ``, "404"},
		{"find", `{"collection":"c","where":{"s":"y"}}`, `{"documents":[{"id":"d","version":2,"data":{"n":2.5,"s":"y"}}],"cursor":""}`, ""},
		{"find", `{"collection":"c","order_by":"n","desc":true,"limit":5}`, `{"documents":[{"id":"d","version":2,"data":{"n":2.5,"s":"y"}},{"id":"e","version":3,"data":{}}],"cursor":""}`, ""},
		{"count", `{"collection":"c"}`, `{"count":2}`, ""},
		{"count", `{"collection":"c","where":{"n":2.5}}`, `{"count":1}`, ""},
		{"delete", `{"collection":"c","id":"d","if_version":1}`, ``, "409"},
		{"delete", `{"collection":"c","id":"d","if_version":2}`, `{}`, ""},
		{"delete", `{"collection":"c","id":"d"}`, ``, "404"},
		{"put", `{"collection":"c","id":"","data":{}}`, ``, "400"},
		{"find", `{"collection":"c","limit":"5"}`, ``, "400"},
		// Text that is not UTF-8 is a 400 at any depth of data or where.
		{"put", `{"collection":"c","id":"f","data":{"o":{"l":["ok","\ud800"]}}}`, ``, "400"},
		{"put", "{\"collection\":\"c\",\"id\":\"f\",\"data\":{\"o\":[{\"s\":\"x\xff\"}]}}", ``, "400"},
		{"put", `{"collection":"c","id":"f","data":{"o":{"\udc00":1}}}`, ``, "400"},
		{"find", `{"collection":"c","where":{"o":{"s":"\ud800"}}}`, ``, "400"},
		{"get", `{"collection":"c","id":"f"}`, ``, "404"},
		{"drop_collection", `{"name":"c"}`, `{}`, ""},
		{"collections", `{}`, `{"collections":[]}`, ""},
	})
}

// FuzzDocumentRequests runs every document endpoint on any body, against a
// fresh store that has the collection "c".
func FuzzDocumentRequests(f *testing.F) {
	fuzzService(f, "document", func(t *testing.T) natsapi.Service {
		store := docmemory.New()
		if err := store.EnsureCollection(context.Background(), "c"); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Put(context.Background(), "c", "d", map[string]any{"n": 1}, ports.Cond{}); err != nil {
			t.Fatal(err)
		}
		return natsapi.Document(store)
	}, ports.ErrInvalidArgument, ports.ErrNotFound, ports.ErrConflict)
}

// A page of large documents is refused 413 at the document that takes it
// past what the call can take, before the rest is encoded; a call that
// can fetch an overflow reply gets the page whole.
func TestAPageIsNeverEncodedPastWhatTheCallTakes(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := docmemory.New()
	ctx := context.Background()
	if err := store.EnsureCollection(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := store.Put(ctx, "c", id, map[string]any{"s": strings.Repeat(id, 600<<10)}, ports.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	newEngine(t, url, newObjects(t), engineOptions{}, natsapi.Document(store))
	nc := natstest.Connect(t, url)
	find := wire.Subject(ports.ServiceDocument, wire.DocFind)
	reply, err := nc.Request(find, []byte(`{"collection":"c"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, text := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader); code != "413" || !strings.Contains(text, "at item 2 of 3") {
		t.Fatalf("a page past one message answered %q %q, want 413 at the second document", code, text)
	}
	msg := nats.NewMsg(find)
	msg.Data = []byte(`{"collection":"c"}`)
	msg.Header.Set(wire.OverflowHeader, "1")
	reply, err = nc.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fetchParked(nc, reply)
	if err != nil {
		t.Fatal(err)
	}
	var page wire.DocPage
	if err := json.Unmarshal(got, &page); err != nil || len(page.Documents) != 3 || page.Cursor != "" {
		t.Fatalf("the parked page: %d documents, cursor %q, %v", len(page.Documents), page.Cursor, err)
	}
}

// The activity log is the engines' record of who held the lease; they
// write it into the store they opened themselves. Any member of the
// account may call the document service, so a caller that could write the
// log could forge an engine's entry, or erase the entries of a takeover.
// Callers read it; a put, delete or drop is refused 400, naming the log,
// and leaves it as the engine wrote it.
func TestACallerCannotWriteDeleteOrDropTheActivityLog(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := docmemory.New()
	ctx := context.Background()
	if err := store.EnsureCollection(ctx, wire.ActivityCollection); err != nil {
		t.Fatal(err)
	}
	entry := map[string]any{"event": "acquired", "instance_id": "e1"}
	if _, err := store.Put(ctx, wire.ActivityCollection, "t1_e1", entry, ports.IfVersion(0)); err != nil {
		t.Fatal(err)
	}
	newHost(t, url, natsapi.Options{}, natsapi.Document(store))
	nc := natstest.Connect(t, url)
	for _, c := range []struct{ op, body string }{
		{wire.DocPut, `{"collection":"activity_log","id":"t2_forged","data":{"event":"took_over","instance_id":"forged"}}`},
		{wire.DocPut, `{"collection":"activity_log","id":"t1_e1","data":{"event":"released"}}`},
		{wire.DocDelete, `{"collection":"activity_log","id":"t1_e1"}`},
		{wire.DocDropCollection, `{"name":"activity_log"}`},
	} {
		reply, err := nc.Request(wire.Subject(ports.ServiceDocument, c.op), []byte(c.body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s %s: %v", c.op, c.body, err)
		}
		code, text := reply.Header.Get(wire.ErrorCodeHeader), reply.Header.Get(wire.ErrorHeader)
		if code != "400" || !strings.Contains(text, "activity log") {
			t.Errorf("%s %s answered %q %q (code %q), want 400 naming the activity log", c.op, c.body, reply.Data, text, code)
		}
	}
	found, _, err := store.Find(ctx, wire.ActivityCollection, ports.Query{})
	if err != nil || len(found) != 1 || found[0].ID != "t1_e1" || found[0].Data["event"] != "acquired" {
		t.Fatalf("the activity log holds %+v (%v), want the engine's one entry as it wrote it", found, err)
	}
	// Reading it stays open to callers, and other collections are theirs.
	checkWire(t, nc, ports.ServiceDocument, nil, []wireStep{
		{"get", `{"collection":"activity_log","id":"t1_e1"}`, `{"id":"t1_e1","version":1,"data":{"event":"acquired","instance_id":"e1"}}`, ""},
		{"ensure_collection", `{"name":"activity"}`, `{}`, ""},
		{"put", `{"collection":"activity","id":"d","data":{}}`, `{"id":"d","version":2,"data":{}}`, ""},
		{"drop_collection", `{"name":"activity"}`, `{}`, ""},
	})
}
