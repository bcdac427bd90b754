package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	docjetstream "github.com/abi-engine/engine/adapters/secondary/document/jetstream"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// jetstreamFields are the jetstream scenario's.
var jetstreamFields = []string{
	"js_kv_get_rps", "js_natskv_get_rps", "js_kv_set_rps", "js_natskv_put_rps", "doc_find_1k_ms", "doc_find_10k_ms",
}

// answerOnTheScenariosBroker makes the lab's engine a script that waits
// until answer has subscribed, on the broker the scenario starts, the
// calls the engine would answer, and then says it serves.
func answerOnTheScenariosBroker(t *testing.T, answer func(nc *nats.Conn) error) *lab {
	t.Helper()
	l := fakeEngine(t)
	ready := filepath.Join(l.dir, "answering")
	script := fmt.Sprintf("#!/bin/sh\nwhile [ ! -e %q ]; do sleep 0.01; done\necho state=serving\nexec sleep 600\n", ready)
	if err := os.WriteFile(l.engine, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	go func() {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			l.mu.Lock()
			brokers := slices.Clone(l.brokers)
			l.mu.Unlock()
			if len(brokers) == 0 {
				continue
			}
			nc, err := nats.Connect(brokers[0].ClientURL())
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(nc.Close)
			if err := answer(nc); err != nil {
				t.Error(err)
				return
			}
			if err := os.WriteFile(ready, nil, 0o600); err != nil {
				t.Error(err)
			}
			return
		}
		t.Error("the scenario started no broker in a minute")
	}()
	return l
}

// A document find is timed only when it answers the documents asked for:
// one that answers 20 documents of another group fails the scenario
// instead of giving doc_find_1k_ms a figure.
func TestAFindAnsweredWithOtherDocumentsFailsTheScenario(t *testing.T) {
	l := answerOnTheScenariosBroker(t, func(nc *nats.Conn) error {
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		// The bucket the engine would make on its first call.
		if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "BENCH_KV"}); err != nil {
			return err
		}
		// The collections the engine's document store would make.
		docs, err := docjetstream.Open(t.Context(), docjetstream.Config{Bucket: "BENCH_DOCS"}, nc)
		if err != nil {
			return err
		}
		t.Cleanup(func() { _ = docs.Close() })
		for _, size := range findSizes {
			if err := docs.EnsureCollection(t.Context(), fmt.Sprintf("find%d", size)); err != nil {
				return err
			}
		}
		var page wire.DocPage
		for i := range 20 {
			page.Documents = append(page.Documents, wire.Document{ID: fmt.Sprintf("doc-%05d", i), Version: 1,
				Data: map[string]any{"n": i, "group": i % 10}})
		}
		found, err := json.Marshal(page)
		if err != nil {
			return err
		}
		got, err := json.Marshal(wire.KVValue{Value: wire.Bytes("value")})
		if err != nil {
			return err
		}
		for subject, answer := range map[string][]byte{
			wire.Subject(ports.ServiceKeyValue, wire.KVGet):               got,
			wire.Subject(ports.ServiceKeyValue, wire.KVSet):               []byte("{}"),
			wire.Subject(ports.ServiceDocument, wire.DocEnsureCollection): []byte("{}"),
			wire.Subject(ports.ServiceDocument, wire.DocFind):             found,
		} {
			if _, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(answer) }); err != nil {
				return err
			}
		}
		return nc.Flush()
	})
	b := &bench{lab: l, duration: 20 * time.Millisecond}
	err := b.jetstream(t.Context())
	if err == nil || !strings.Contains(err.Error(), "find in 1000 documents") {
		t.Fatalf("the jetstream scenario: %v, want its find in 1000 documents to fail", err)
	}
	if b.result.DocFind1kMS != nil {
		t.Errorf("doc_find_1k_ms is %v after a find answered other documents, want null", *b.result.DocFind1kMS)
	}
}
