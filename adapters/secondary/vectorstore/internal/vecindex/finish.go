package vecindex

import (
	"cmp"
	"slices"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/internal/vecutil"
	"github.com/abi-engine/engine/ports"
)

// Finish turns candidates into the answer of a search: each is looked up
// in the adapter's own data (get reports false for one deleted since),
// checked against the filter, scored exactly in float64 from the stored
// values, and the k closest are returned, closest first, equal scores
// ordered by id.
func Finish(m ports.Metric, query []float32, k int, cands []Candidate, f vecutil.Filter, get func(id string) (ports.Vector, bool)) []ports.ScoredVector {
	out := make([]ports.ScoredVector, 0, len(cands))
	for _, c := range cands {
		v, ok := get(c.ID)
		if !ok || !f.Match(v.Payload) {
			continue
		}
		out = append(out, ports.ScoredVector{Vector: v, Score: vecutil.Score(m, query, v.Values)})
	}
	slices.SortFunc(out, func(a, b ports.ScoredVector) int {
		c := cmp.Compare(b.Score, a.Score)
		if m == ports.MetricEuclid {
			c = -c
		}
		if c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out[:min(k, len(out))]
}
