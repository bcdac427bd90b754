package natsclient_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	docmemory "github.com/abi-engine/engine/adapters/secondary/document/memory"
	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	objmemory "github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/ports"
)

// The ports read any limit <= 0 as the default page of 100. The facades
// send a negative limit as 0, the form the protocol names for the default
// page, so a caller of the port gets the page the port promises from any
// engine.
func TestANegativeLimitThroughTheFacadesIsTheDefaultPage(t *testing.T) {
	ctx := t.Context()
	kv, err := kvmemory.Open(ctx, kvmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := docmemory.Open(ctx, docmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	objects, err := objmemory.Open(ctx, objmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
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
	url, caller := broker(t)
	serveEngine(t, url, func(tr *natsapi.TransferHost) []natsapi.Service {
		return []natsapi.Service{natsapi.KeyValue(kv), natsapi.Document(docs), natsapi.ObjectStorage(objects, tr)}
	})
	client := natsclient.New(caller(t))
	for _, limit := range []int{-1, -5} {
		keys, next, err := natsclient.NewKeyValue(client).ListKeys(ctx, "", limit, "")
		if err != nil || len(keys) != ports.DefaultPage || next == "" {
			t.Errorf("ListKeys with limit %d: %d keys, next %q, %v; want %d and a cursor", limit, len(keys), next, err, ports.DefaultPage)
		}
		found, next, err := natsclient.NewDocument(client).Find(ctx, "c", ports.Query{Limit: limit})
		if err != nil || len(found) != ports.DefaultPage || next == "" {
			t.Errorf("Find with limit %d: %d documents, next %q, %v; want %d and a cursor", limit, len(found), next, err, ports.DefaultPage)
		}
		infos, next, err := natsclient.NewObjectStorage(client).List(ctx, "", limit, "")
		if err != nil || len(infos) != ports.DefaultPage || next == "" {
			t.Errorf("List with limit %d: %d objects, next %q, %v; want %d and a cursor", limit, len(infos), next, err, ports.DefaultPage)
		}
	}
}
