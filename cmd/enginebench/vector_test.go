package main

import (
	"testing"

	"github.com/abi-engine/engine/ports"
)

// vectorFields are the fields of the vector scenario, which runs by
// default; vector200kFields those of vector200k, which runs when named.
var (
	vectorFields = []string{
		"vec_upsert_per_s", "vec_search_p50_ms_20k", "vec_search_p90_ms_20k", "vec_filtered_search_p50_ms_20k",
		"vec_exact_scan_p50_ms_20k", "vec_bytes_per_vector", "vec_memory_upsert_per_s",
		"vec_memory_search_p50_ms_20k", "vec_memory_filtered_search_p50_ms_20k", "vec_memory_bytes_per_vector",
	}
	vector200kFields = []string{
		"vec_search_p50_ms_200k", "vec_recall_at_10", "vec_filtered_search_p50_ms_200k", "vec_filtered_recall_at_10",
		"vec_index_build_s", "vec_bytes_per_vector_200k", "vec_exact_scan_p50_ms_200k",
		"vec_memory_search_p50_ms_200k", "vec_memory_recall_at_10", "vec_memory_filtered_recall_at_10",
		"vec_memory_index_build_s", "vec_memory_bytes_per_vector_200k",
	}
)

// The reference scan is what recall is measured against: it must find a
// point's own nearest neighbours, filtered or not.
func TestTheReferenceScanFindsTheNeighbours(t *testing.T) {
	d := &vecData{}
	for i, v := range [][]float32{{1, 0}, {0.9, 0.1}, {0, 1}, {-1, 0}, {0.8, -0.2}} {
		full := make([]float32, vecDim)
		copy(full, v)
		d.points = append(d.points, ports.Vector{ID: string(rune('a' + i))})
		d.unit = append(d.unit, unit(full))
	}
	q := make([]float32, vecDim)
	q[0] = 1
	got := d.exact(q, false)
	if len(got) != 5 || got[0] != "a" || got[1] != "b" || got[2] != "e" || got[4] != "d" {
		t.Fatalf("exact ranks %v, want a b e c d", got)
	}
	if got := d.exact(q, true); len(got) != 2 || got[0] != "b" || got[1] != "d" {
		t.Fatalf("exact over the odd points ranks %v, want b d", got)
	}
	hits := recall([]ports.ScoredVector{{Vector: ports.Vector{ID: "a"}}, {Vector: ports.Vector{ID: "z"}}}, []string{"a", "b"})
	if hits != 0.5 {
		t.Fatalf("recall = %v, want 0.5", hits)
	}
}

// Recall at k credits each true neighbour once, among the first k
// answers: a search that repeats one neighbour, or answers more than k
// vectors, must not be reported as finding neighbours it did not find,
// or the 20,000-vector run's check that recall is 1 passes a broken store.
func TestRecallCountsEachTrueNeighbourOnceAmongTheFirstK(t *testing.T) {
	hit := func(ids ...string) []ports.ScoredVector {
		out := make([]ports.ScoredVector, len(ids))
		for i, id := range ids {
			out[i] = ports.ScoredVector{Vector: ports.Vector{ID: id}}
		}
		return out
	}
	want := []string{"a", "b", "c", "d"}
	cases := []struct {
		name string
		got  []ports.ScoredVector
		want float64
	}{
		{"AllFound", hit("d", "c", "b", "a"), 1},
		{"OneNeighbourRepeated", hit("a", "a", "a", "a"), 0.25},
		{"MoreThanK", hit("x", "y", "a", "b", "c", "d"), 0.5},
		{"Nothing", nil, 0},
	}
	for _, c := range cases {
		if got := recall(c.got, want); got != c.want {
			t.Errorf("%s: recall = %v, want %v", c.name, got, c.want)
		}
	}
}
