package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	docjetstream "github.com/abi-engine/engine/adapters/secondary/document/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/ports"
)

// JetStreamResult are the jetstream scenario's fields: the engine's
// keyvalue on the JetStream adapter beside NATS KV on the same bucket, in
// the same run, and the document find, which that adapter answers by a
// scan.
type JetStreamResult struct {
	JSKVGetRPS     *float64 `json:"js_kv_get_rps"`
	JSNATSKVGetRPS *float64 `json:"js_natskv_get_rps"`
	JSKVSetRPS     *float64 `json:"js_kv_set_rps"`
	JSNATSKVPutRPS *float64 `json:"js_natskv_put_rps"`
	DocFind1kMS    *float64 `json:"doc_find_1k_ms"`
	DocFind10kMS   *float64 `json:"doc_find_10k_ms"`
}

func (r JetStreamResult) rows() []row {
	f := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f", *v)
	}
	return []row{
		{"js_kv_get_rps", f(r.JSKVGetRPS), ""},
		{"js_natskv_get_rps", f(r.JSNATSKVGetRPS), ""},
		{"js_kv_set_rps", f(r.JSKVSetRPS), ""},
		{"js_natskv_put_rps", f(r.JSNATSKVPutRPS), ""},
		{"doc_find_1k_ms", f(r.DocFind1kMS), ""},
		{"doc_find_10k_ms", f(r.DocFind10kMS), ""},
	}
}

// findSizes are the collection sizes the document find is timed at.
var findSizes = []int{1000, 10000}

// findRounds is how many finds are timed at each size.
const findRounds = 5

// jetstream runs keyvalue get and set through an engine on the JetStream
// adapter, beside the same calls on NATS KV used directly on the same
// bucket (the engine's overhead), and times a document find over
// collections of 1,000 and 10,000 documents, which that adapter scans.
func (b *bench) jetstream(ctx context.Context) error {
	s, err := b.lab.broker()
	if err != nil {
		return err
	}
	url := s.ClientURL()
	dir, err := b.lab.mkdir("engine-jetstream")
	if err != nil {
		return err
	}
	config := filepath.Join(dir, "engine.yaml")
	yaml := fmt.Sprintf(`nats:
  url: %s
  engine: {lease_seconds: %d, drain_seconds: 5}
data_dir: %s
http: {listen: "127.0.0.1:0"}
services:
  keyvalue: {adapter: jetstream, config: {bucket: BENCH_KV}}
  document: {adapter: jetstream, config: {bucket: BENCH_DOCS}}
  object_storage: {adapter: off}
  vector_store: {adapter: off}
  cache: {adapter: off}
  secret: {adapter: env}
`, url, b.lease, filepath.Join(dir, "data"))
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		return err
	}
	e, err := b.engine(ctx, config, "serving")
	if err != nil {
		return err
	}
	defer e.stop(10 * time.Second)
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	kv := natsclient.NewKeyValue(natsclient.New(nc))
	// The engine made the bucket on its first call.
	if err := kv.Set(ctx, "bench", []byte("value"), 0); err != nil {
		return err
	}
	bucket, err := js.KeyValue(ctx, "BENCH_KV")
	if err != nil {
		return err
	}
	if _, err := bucket.Put(ctx, "direct", []byte("value")); err != nil {
		return err
	}
	r := &b.result.JetStreamResult
	var n atomic.Int64
	rps := func(what string, call func(ctx context.Context) error) (*float64, error) {
		st, err := drive(ctx, callers, b.duration, func(ctx context.Context, _ int) error { return call(ctx) })
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return ptr(round(st.rps)), nil
	}
	if r.JSKVGetRPS, err = rps("keyvalue get on jetstream", func(ctx context.Context) error {
		got, err := kv.Get(ctx, "bench")
		if err != nil {
			return err
		}
		return answered("the engine's keyvalue get", got, []byte("value"))
	}); err != nil {
		return err
	}
	if r.JSNATSKVGetRPS, err = rps("NATS KV get", func(ctx context.Context) error {
		entry, err := bucket.Get(ctx, "direct")
		if err != nil {
			return err
		}
		return answered("NATS KV's get", entry.Value(), []byte("value"))
	}); err != nil {
		return err
	}
	if r.JSKVSetRPS, err = rps("keyvalue set on jetstream", func(ctx context.Context) error {
		return kv.Set(ctx, fmt.Sprintf("set/%d", n.Add(1)%1000), []byte("value"), 0)
	}); err != nil {
		return err
	}
	if r.JSNATSKVPutRPS, err = rps("NATS KV put", func(ctx context.Context) error {
		_, err := bucket.Put(ctx, fmt.Sprintf("put.%d", n.Add(1)%1000), []byte("value"))
		return err
	}); err != nil {
		return err
	}
	b.note("NATS KV gets are direct gets, which any replica may answer; the adapter reads from the stream's leader")

	docs := natsclient.NewDocument(natsclient.New(nc))
	fill, err := docjetstream.Open(ctx, docjetstream.Config{Bucket: "BENCH_DOCS"}, nc)
	if err != nil {
		return err
	}
	for _, size := range findSizes {
		coll := fmt.Sprintf("find%d", size)
		if err := docs.EnsureCollection(ctx, coll); err != nil {
			return err
		}
		if err := fillCollection(ctx, fill, coll, size); err != nil {
			return err
		}
		var took []time.Duration
		for range findRounds {
			start := time.Now()
			page, _, err := docs.Find(ctx, coll, ports.Query{Where: map[string]any{"group": 3.0}, OrderBy: "n", Limit: 20})
			if err != nil {
				return fmt.Errorf("find in %d documents: %w", size, err)
			}
			took = append(took, time.Since(start))
			if err := foundInGroup3(page); err != nil {
				return fmt.Errorf("find in %d documents: %w", size, err)
			}
		}
		slices.Sort(took)
		ms := ptr(millis(percentile(took, 50)))
		if size == 1000 {
			r.DocFind1kMS = ms
		} else {
			r.DocFind10kMS = ms
		}
	}
	return nil
}

// foundInGroup3 checks a find's page against what fillCollection wrote:
// the 20 documents of group 3 with the lowest n (3, 13, 23 ...), in the
// order of n. A find is timed only when it answered them, so one that
// answers fast with other documents fails the scenario instead of giving
// it a figure.
func foundInGroup3(page []ports.Document) error {
	if len(page) != 20 {
		return fmt.Errorf("gave %d documents, want 20", len(page))
	}
	for i, d := range page {
		if n := float64(3 + 10*i); d.Data["group"] != 3.0 || d.Data["n"] != n {
			return fmt.Errorf("gave %s %v at %d, want n %v of group 3", d.ID, d.Data, i, n)
		}
	}
	return nil
}

// fillCollection writes size documents straight into the bucket, in
// parallel: the find is timed, the filling is not.
func fillCollection(ctx context.Context, s *docjetstream.Store, coll string, size int) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= size || ctx.Err() != nil {
					return
				}
				_, err := s.Put(ctx, coll, fmt.Sprintf("doc-%05d", i), map[string]any{"n": i, "group": i % 10}, ports.Cond{})
				if err != nil {
					mu.Lock()
					firstErr = cmp(firstErr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}
