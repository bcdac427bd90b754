package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/ports"
)

// notDoneKV fails every Set as a store that did not do it (ports.ErrNotDone),
// naming a file of the engine's host, and counts the Sets.
type notDoneKV struct {
	ports.KeyValue
	sets atomic.Int64
}

const notDoneFile = "/var/lib/abi/objects/.upload-17"

func (n *notDoneKV) Set(context.Context, string, []byte, time.Duration) error {
	n.sets.Add(1)
	return fmt.Errorf("set: the service refused each sending of %s: %w", notDoneFile, ports.ErrNotDone)
}

// A write its store did not do, and that changed nothing (ports.ErrNotDone),
// answers 503 with Retry-After, which tells the client to send it again,
// whether the API calls the store in the process or through the serving
// engine; and, as a 500's, its body says what failed and where in the log
// the rest is, never the store's text. Before, it answered 500, "failed in
// the engine", which a client may not send again blindly.
func TestAWriteTheStoreDidNotDoAnswers503WithRetryAfter(t *testing.T) {
	for _, via := range []string{"in the process", "through the engine"} {
		t.Run(via, func(t *testing.T) {
			inner, err := kvmemory.Open(t.Context(), kvmemory.Config{})
			if err != nil {
				t.Fatal(err)
			}
			kv := &notDoneKV{KeyValue: inner}
			services := httpapi.Services{KeyValue: kv}
			if via == "through the engine" {
				services = heldKernel(t, kv)
			}
			a := serveAPI(t, services, httpapi.Options{})
			resp, body := a.expect(http.StatusServiceUnavailable, "PUT", "/v1/kv/k", "v")
			if resp.Header.Get("Retry-After") == "" {
				t.Fatalf("a 503 for a write the store did not do has no Retry-After: %s", body)
			}
			if strings.Contains(body, notDoneFile) {
				t.Fatalf("the 503 body carries the store's text: %s", body)
			}
			if !strings.Contains(body, "log ref ") || !strings.Contains(body, "send it again") {
				t.Fatalf("the 503 body %s names neither a log reference nor that the write may be sent again", body)
			}
			if kv.sets.Load() == 0 {
				t.Fatalf("the store saw no Set: the test shows nothing")
			}
		})
	}
}
