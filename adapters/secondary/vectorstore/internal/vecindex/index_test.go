package vecindex

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
)

func randomEntries(r *rand.Rand, n, dim int) []Entry {
	out := make([]Entry, n)
	for i := range out {
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32(r.NormFloat64())
		}
		out[i] = Entry{ID: fmt.Sprintf("v%05d", i), Values: v, Payload: map[string]any{"g": float64(i % 4)}}
	}
	return out
}

func TestKernelsMatchThePlainLoops(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 8, 9, 24, 31, 32, 33, 40, 383, 384} {
		a, b := make([]float32, n), make([]float32, n)
		var wantDot, wantL2 float64
		for i := range a {
			a[i], b[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
			wantDot += float64(a[i]) * float64(b[i])
			wantL2 += float64(a[i]-b[i]) * float64(a[i]-b[i])
		}
		for name, f := range map[string]func(a, b []float32) float32{"dot": dot, "dotGo": dotGo} {
			if got := float64(f(a, b)); math.Abs(got-wantDot) > 1e-4*math.Max(1, math.Abs(wantDot)) {
				t.Errorf("%s of length %d = %v, want %v", name, n, got, wantDot)
			}
		}
		for name, f := range map[string]func(a, b []float32) float32{"l2": l2, "l2Go": l2Go} {
			if got := float64(f(a, b)); math.Abs(got-wantL2) > 1e-4*math.Max(1, wantL2) {
				t.Errorf("%s of length %d = %v, want %v", name, n, got, wantL2)
			}
		}
	}
}

// waitBuilt waits for the graph builder, with a generous limit.
func waitBuilt(t *testing.T, x *Index) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !x.Built() {
		if time.Now().After(deadline) {
			t.Fatal("the graph builder did not finish in 2 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func recall(got, want []Candidate, k int) float64 {
	in := map[string]bool{}
	for _, c := range want[:min(k, len(want))] {
		in[c.ID] = true
	}
	hits := 0
	for _, c := range got[:min(k, len(got))] {
		if in[c.ID] {
			hits++
		}
	}
	return float64(hits) / float64(min(k, len(want)))
}

func TestGraphRecallAgainstTheExactScan(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n, dim, k = 1500, 24, 10
	entries := randomEntries(r, n, dim)
	for _, m := range []ports.Metric{ports.MetricCosine, ports.MetricDot, ports.MetricEuclid} {
		approx := New(dim, m, Options{Threshold: 300})
		exact := New(dim, m, Options{Threshold: -1})
		t.Cleanup(approx.Close)
		approx.Put(entries)
		exact.Put(entries)
		waitBuilt(t, approx)
		if !approx.Approximate() || exact.Approximate() {
			t.Fatalf("%s: above the threshold the index is approximate: %v, with none: %v", m, approx.Approximate(), exact.Approximate())
		}
		var sum, sumFiltered float64
		const queries = 50
		filter := map[string]any{"g": float64(1)}
		for range queries {
			q := randomEntries(r, 1, dim)[0].Values
			sum += recall(approx.Search(q, k, nil), exact.Search(q, k, nil), k)
			sumFiltered += recall(approx.Search(q, k, filter), exact.Search(q, k, filter), k)
		}
		if sum /= queries; sum < 0.95 {
			t.Errorf("%s: recall@%d is %.3f, want at least 0.95", m, k, sum)
		}
		if sumFiltered /= queries; sumFiltered < 0.95 {
			t.Errorf("%s: filtered recall@%d is %.3f, want at least 0.95", m, k, sumFiltered)
		}
	}
}

func TestExactSearchIsDeterministicOnTies(t *testing.T) {
	x := New(2, ports.MetricDot, Options{})
	var es []Entry
	for i := range 40 {
		es = append(es, Entry{ID: fmt.Sprintf("t%02d", 39-i), Values: []float32{1, 1}})
	}
	x.Put(es)
	got := x.Search([]float32{1, 0}, 5, nil)
	var ids []string
	for _, c := range got {
		ids = append(ids, c.ID)
	}
	if !slices.IsSorted(ids) || ids[0] != "t00" {
		t.Fatalf("equal scores come back as %v, want ordered by id from t00", ids)
	}
}

func TestGraphFollowsDeletesReplacesAndShrinking(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const dim = 16
	entries := randomEntries(r, 400, dim)
	x := New(dim, ports.MetricEuclid, Options{Threshold: 100})
	t.Cleanup(x.Close)
	x.Put(entries)
	waitBuilt(t, x)
	// Move every vector far away under the same id: the old slots must
	// never be returned.
	moved := make([]Entry, len(entries))
	for i, e := range entries {
		v := slices.Clone(e.Values)
		for j := range v {
			v[j] += 100
		}
		moved[i] = Entry{ID: e.ID, Values: v, Payload: e.Payload}
	}
	x.Put(moved[:300])
	waitBuilt(t, x)
	for _, c := range x.Search(entries[0].Values, 10, nil) {
		if c.Distance > 0 && slices.ContainsFunc(moved[:300], func(e Entry) bool { return e.ID == c.ID }) && c.Distance < 100 {
			t.Fatalf("%s comes back at its old place (distance %v)", c.ID, c.Distance)
		}
	}
	ids := make([]string, 0, 351)
	for _, e := range entries[:351] {
		ids = append(ids, e.ID)
	}
	x.Remove(ids)
	if x.Len() != 49 || x.Approximate() {
		t.Fatalf("after shrinking to %d vectors (threshold 100) the index is approximate: %v", x.Len(), x.Approximate())
	}
	got := x.Search(entries[399].Values, 100, nil)
	if len(got) != 49 || got[0].ID != entries[399].ID || got[0].Distance != 0 {
		t.Fatalf("after shrinking, search gives %d results starting %+v", len(got), got[0])
	}
}

func BenchmarkDot(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	e := randomEntries(r, 2, 384)
	b.Run("kernel", func(b *testing.B) {
		for b.Loop() {
			dot(e[0].Values, e[1].Values)
		}
	})
	b.Run("unrolled", func(b *testing.B) {
		for b.Loop() {
			dotGo(e[0].Values, e[1].Values)
		}
	})
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			var s float32
			for i, x := range e[0].Values {
				s += x * e[1].Values[i]
			}
			_ = s
		}
	})
}

func BenchmarkExactScan20k(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	x := New(384, ports.MetricCosine, Options{Threshold: -1})
	x.Put(randomEntries(r, 20000, 384))
	q := randomEntries(r, 1, 384)[0].Values
	for b.Loop() {
		x.Search(q, 10, nil)
	}
}

// BenchmarkBytesPerVector reports the live heap an index takes per vector
// of dimension 384 with a two-field payload, searched exactly and with its
// graph built.
func BenchmarkBytesPerVector(b *testing.B) {
	const n = 10_000
	r := rand.New(rand.NewPCG(1, 2))
	entries := randomEntries(r, n, 384)
	for _, c := range []struct {
		name      string
		threshold int
	}{{"exact", -1}, {"graph", n / 2}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				x := New(384, ports.MetricCosine, Options{Threshold: c.threshold})
				x.Put(entries)
				for !x.Built() {
					time.Sleep(10 * time.Millisecond)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/vector")
				x.Close()
				runtime.KeepAlive(x)
			}
		})
	}
}

// A staged write is not seen by searches until it is published, and then
// whole: a replaced vector keeps its old values and a new one is not found
// in between.
func TestAStagedWriteIsSeenOnlyOncePublished(t *testing.T) {
	x := New(2, ports.MetricEuclid, Options{Threshold: -1})
	x.Put([]Entry{{ID: "a", Values: []float32{0, 0}}})
	st := x.Stage([]Entry{{ID: "a", Values: []float32{5, 5}}, {ID: "b", Values: []float32{1, 1}}})
	if got := x.Search([]float32{0, 0}, 2, nil); len(got) != 1 || got[0].ID != "a" || got[0].Distance != 0 || x.Len() != 1 {
		t.Fatalf("before Publish, a search finds %+v in %d vectors; want a at distance 0, alone", got, x.Len())
	}
	st.Publish()
	if got := x.Search([]float32{0, 0}, 2, nil); len(got) != 2 || got[0].ID != "b" || got[1].Distance != 50 || x.Len() != 2 {
		t.Fatalf("after Publish, a search finds %+v in %d vectors; want b, then a at distance 50", got, x.Len())
	}
}

// Writes that grow the storage past a block's end, from a short last
// block, a full one and free slots, keep every vector where its id finds
// it: a search for each vector's own values finds it at distance 0.
func TestWritesGrowingTheStorageKeepEveryVector(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := New(3, ports.MetricEuclid, Options{Threshold: -1})
	all := map[string]Entry{}
	put := func(entries []Entry) {
		x.Put(entries)
		for _, e := range entries {
			all[e.ID] = e
		}
	}
	for _, n := range []int{1, 700, chunkSlots, 2*chunkSlots + 5} {
		batch := randomEntries(r, n, 3)
		for i := range batch {
			batch[i].ID = fmt.Sprintf("%d/%d", n, i)
		}
		put(batch)
	}
	gone := make([]string, 0, 300)
	for id := range all {
		if len(gone) == cap(gone) {
			break
		}
		gone = append(gone, id)
	}
	x.Remove(gone)
	for _, id := range gone {
		delete(all, id)
	}
	refill := randomEntries(r, 500, 3)
	for i := range refill {
		refill[i].ID = fmt.Sprint("refill/", i)
	}
	put(refill)
	if x.Len() != len(all) {
		t.Fatalf("the index holds %d vectors, want %d", x.Len(), len(all))
	}
	for id, e := range all {
		if got := x.Search(e.Values, 1, nil); len(got) == 0 || got[0].Distance != 0 {
			t.Fatalf("a search for %s's own values found %+v, want it at distance 0", id, got)
		}
	}
}
