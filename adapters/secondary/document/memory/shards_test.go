package memory

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// shot is what a find took, and the documents as they stood when it did.
type shot struct {
	shards []map[string]stored
	want   map[string]stored
}

// checkShot fails unless the shards a find took still hold the documents
// as they stood then, each once.
func checkShot(t *testing.T, s shot) {
	t.Helper()
	got := map[string]stored{}
	for _, sh := range s.shards {
		for id, d := range sh {
			if _, twice := got[id]; twice {
				t.Fatalf("%q is in two shards", id)
			}
			got[id] = d
		}
	}
	if !maps.EqualFunc(got, s.want, func(a, b stored) bool { return a.version == b.version }) {
		t.Fatalf("a find took %d documents, and holds %d of them as they stood then", len(s.want), len(got))
	}
}

// A collection's shards hold every document put and not removed, whatever
// splits they went through, each shard about shardMax at most; and what a
// find took stays as the collection stood when it took it, through every
// put, replacement and removal after.
func TestFindsKeepTheShardsTheyTookThroughLaterWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	c := newDocs()
	c.remove("d")
	if _, ok := c.get("d"); ok || len(c.snapshot()) != 0 {
		t.Fatal("an empty collection holds a document")
	}
	want := map[string]stored{}
	var shots []shot
	version := uint64(0)
	for step := range 60_000 {
		id := fmt.Sprintf("d%05d", rng.IntN(30_000))
		if rng.IntN(3) == 0 {
			c.remove(id)
			delete(want, id)
		} else {
			version++
			d := stored{version: version, raw: []byte(`{}`)}
			c.put(id, d)
			want[id] = d
		}
		if step%5_000 == 0 {
			shots = append(shots, shot{c.snapshot(), maps.Clone(want)})
		}
	}
	shots = append(shots, shot{c.snapshot(), maps.Clone(want)})
	for _, s := range shots {
		checkShot(t, s)
	}
	var bytes int64
	for id, d := range want {
		bytes += docCost(id, d.raw)
	}
	if c.n != len(want) || c.bytes != bytes {
		t.Fatalf("the collection counts %d documents of %d bytes, want %d of %d", c.n, c.bytes, len(want), bytes)
	}
	for i, sh := range c.dir {
		if len(sh.m) > shardMax {
			t.Fatalf("shard %d holds %d documents, more than %d", i, len(sh.m), shardMax)
		}
	}
	if len(c.dir) < len(want)/shardMax {
		t.Fatalf("%d documents in a directory of %d shards", len(want), len(c.dir))
	}
}
