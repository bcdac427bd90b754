package vecindex

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
)

// The graph is a Hierarchical Navigable Small World graph as described by
// Yu. A. Malkov and D. A. Yashunin, "Efficient and robust approximate
// nearest neighbor search using Hierarchical Navigable Small World graphs",
// IEEE TPAMI 42(4), 2020 (arXiv:1603.09320): layers of proximity graphs,
// each a random subset of the one below, searched greedily from the top;
// neighbours are chosen by the paper's heuristic (its algorithm 4), which
// keeps links in diverse directions.
const (
	// hnswM is the number of links a node keeps on the upper layers; the
	// bottom layer keeps twice as many (the paper's Mmax0 = 2M).
	hnswM = 16
	// hnswEfBuild is the candidate list of an insertion (efConstruction).
	hnswEfBuild = 100
	// hnswEfSearch is the least candidate list of a search; a search for
	// more than that many results uses k+margin instead.
	hnswEfSearch = 128
	// hnswMaxLevel caps the random level, which only a broken random
	// source would reach.
	hnswMaxLevel = 16
)

// graph links the slots of an index. A slot of a deleted vector stays in
// the graph as a waypoint (it is never returned) until the graph is
// rebuilt; the index rebuilds when such slots outnumber the live ones.
type graph struct {
	x     *Index
	level []int8    // per slot; -1 when not in the graph
	links [][]int32 // per slot, the bottom layer
	upper [][][]int32
	entry int32
	top   int
	nodes int // slots put in, dead ones included
	dead  int
	ml    float64
	rng   *rand.Rand
	seen  visits // for insertions, under the write lock
}

// newGraph makes an empty graph over x's slots. The level draw is seeded,
// so the same writes in the same order build the same graph.
func newGraph(x *Index) *graph {
	return &graph{x: x, entry: -1, ml: 1 / math.Log(hnswM), rng: rand.New(rand.NewPCG(0x4e5357, 0x484e5357))}
}

func (g *graph) has(s int32) bool { return int(s) < len(g.level) && g.level[s] >= 0 }

func (g *graph) neighbours(s int32, l int) []int32 {
	if l == 0 {
		return g.links[s]
	}
	return g.upper[s][l-1]
}

func (g *graph) setNeighbours(s int32, l int, n []int32) {
	if l == 0 {
		g.links[s] = n
		return
	}
	g.upper[s][l-1] = n
}

func maxLinks(l int) int {
	if l == 0 {
		return 2 * hnswM
	}
	return hnswM
}

// insert puts live slot s into the graph (the paper's algorithm 1).
func (g *graph) insert(s int32) {
	for len(g.level) <= int(s) {
		g.level = append(g.level, -1)
		g.links = append(g.links, nil)
		g.upper = append(g.upper, nil)
	}
	l := min(int(-math.Log(1-g.rng.Float64())*g.ml), hnswMaxLevel)
	g.level[s] = int8(l)
	g.nodes++
	g.links[s] = make([]int32, 0, maxLinks(0)+linkSlack(0)+1)
	if l > 0 {
		g.upper[s] = make([][]int32, l)
		for i := range g.upper[s] {
			g.upper[s][i] = make([]int32, 0, maxLinks(i+1)+linkSlack(i+1)+1)
		}
	}
	if g.entry < 0 {
		g.entry, g.top = s, l
		return
	}
	q := g.x.vec(s)
	ep := []cand{{g.entry, g.x.distance(q, g.entry)}}
	for lc := g.top; lc > l; lc-- {
		ep = g.layer(q, ep, 1, lc, nil, &g.seen)
	}
	for lc := min(l, g.top); lc >= 0; lc-- {
		w := g.layer(q, ep, hnswEfBuild, lc, nil, &g.seen)
		chosen := g.pick(w, hnswM)
		for _, c := range chosen {
			g.setNeighbours(s, lc, append(g.neighbours(s, lc), c.slot))
		}
		for _, c := range chosen {
			g.link(c.slot, s, lc)
		}
		ep = w
	}
	if l > g.top {
		g.entry, g.top = s, l
	}
}

// linkSlack is how far a node's links may overflow before they are
// shrunk back to maxLinks: shrinking runs the heuristic over every link,
// so letting a few accumulate does it several times less often (a
// search walks at most that many more links).
func linkSlack(l int) int { return maxLinks(l) / 4 }

// link adds s to e's neighbours on layer l, shrinking them by the
// heuristic when they overflow by more than the slack.
func (g *graph) link(e, s int32, l int) {
	n := append(g.neighbours(e, l), s)
	if len(n) <= maxLinks(l)+linkSlack(l) {
		g.setNeighbours(e, l, n)
		return
	}
	base := g.x.vec(e)
	cs := make([]cand, len(n))
	for i, o := range n {
		cs[i] = cand{o, g.x.distance(base, o)}
	}
	slices.SortFunc(cs, byDistance)
	kept := g.pick(cs, maxLinks(l))
	n = n[:0]
	for _, c := range kept {
		n = append(n, c.slot)
	}
	g.setNeighbours(e, l, n)
}

func byDistance(a, b cand) int {
	switch {
	case a.d < b.d:
		return -1
	case a.d > b.d:
		return 1
	}
	return int(a.slot - b.slot)
}

// pick chooses up to m neighbours from candidates sorted closest first by
// the paper's heuristic: a candidate is kept only if it is closer to the
// base than to every one kept before it.
func (g *graph) pick(cs []cand, m int) []cand {
	if len(cs) <= m {
		return cs
	}
	out := make([]cand, 0, m)
	for _, c := range cs {
		good := true
		v := g.x.vec(c.slot)
		for _, o := range out {
			if g.x.distance(v, o.slot) < c.d {
				good = false
				break
			}
		}
		if good {
			if out = append(out, c); len(out) == m {
				break
			}
		}
	}
	return out
}

// layer searches one layer from the entry points (the paper's algorithm 2)
// and returns up to ef nodes, closest first. With accept, only accepted
// nodes are kept as results, though every node is walked through.
func (g *graph) layer(q []float32, eps []cand, ef, l int, accept func(int32) bool, seen *visits) []cand {
	seen.reset(len(g.level))
	var todo minHeap
	var found maxHeap
	for _, e := range eps {
		seen.mark(e.slot)
		todo.push(e)
		if accept == nil || accept(e.slot) {
			found.push(e)
		}
	}
	for len(todo) > 0 {
		c := todo.pop()
		if len(found) >= ef && c.d > found[0].d {
			break
		}
		for _, n := range g.neighbours(c.slot, l) {
			if seen.mark(n) {
				continue
			}
			d := g.x.distance(q, n)
			if len(found) < ef || d < found[0].d {
				todo.push(cand{n, d})
				if accept == nil || accept(n) {
					found.push(cand{n, d})
					if len(found) > ef {
						found.pop()
					}
				}
			}
		}
	}
	out := []cand(found)
	slices.SortFunc(out, byDistance)
	return out
}

// search offers the graph's closest live slots holding the wanted terms to
// top (the paper's algorithm 5). A filter that leaves a share of the
// collection widens the list by its inverse, so the walk still meets
// enough of them.
func (g *graph) search(q []float32, want []uint32, share float64, top *topK) {
	if g.entry < 0 {
		return
	}
	x := g.x
	ef := max(hnswEfSearch, top.n)
	accept := func(s int32) bool { return x.ids[s] != "" }
	if len(want) > 0 {
		ef = min(int(float64(ef)/share), 8*ef)
		accept = func(s int32) bool { return x.ids[s] != "" && holds(x.terms[s], want) }
	}
	seen := visitPool.Get().(*visits)
	defer visitPool.Put(seen)
	ep := []cand{{g.entry, x.distance(q, g.entry)}}
	for lc := g.top; lc > 0; lc-- {
		ep = g.layer(q, ep, 1, lc, nil, seen)
	}
	for _, c := range g.layer(q, ep, ef, 0, accept, seen) {
		top.offer(c.slot, x.finite(q, c.slot, c.d))
	}
}

// visits marks the slots a walk has met, by generation so a reset costs
// nothing.
type visits struct {
	gen   uint32
	marks []uint32
}

var visitPool = sync.Pool{New: func() any { return new(visits) }}

func (v *visits) reset(n int) {
	if len(v.marks) < n {
		v.marks = make([]uint32, n+n/4)
		v.gen = 0
	}
	v.gen++
	if v.gen == 0 {
		clear(v.marks)
		v.gen = 1
	}
}

// mark records s and reports whether it was already met.
func (v *visits) mark(s int32) bool {
	if v.marks[s] == v.gen {
		return true
	}
	v.marks[s] = v.gen
	return false
}

// minHeap and maxHeap order candidates by distance.
type minHeap []cand

func (h *minHeap) push(c cand) {
	*h = append(*h, c)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].d <= a[i].d {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *minHeap) pop() cand {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && a[r].d < a[l].d {
			m = r
		}
		if a[i].d <= a[m].d {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}

type maxHeap []cand

func (h *maxHeap) push(c cand) {
	*h = append(*h, c)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].d >= a[i].d {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *maxHeap) pop() cand {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && a[r].d > a[l].d {
			m = r
		}
		if a[i].d >= a[m].d {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}
