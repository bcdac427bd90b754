package memory

import (
	"hash/maphash"
	"maps"
)

// shardMax is the most documents a shard holds before it splits: what a
// write after a find copies at most, and what a find takes in one piece.
const shardMax = 4096

// maxDepth bounds how far the directory doubles: past it a shard grows
// instead of splitting, which only ids whose hashes agree in their first
// maxDepth bits would need.
const maxDepth = 24

// docs is a collection's documents in shards by a hash of the id, each of
// at most about shardMax (extendible hashing: a full shard splits alone,
// the directory of shards doubling when it must). A find takes the shards
// as they stand, in time that grows with how many shards there are, not
// with the documents, and marks them shared; a write to a shared shard
// copies it first. So a find answers as the collection stood when it began
// without copying every document under the store's lock, and a write
// after it copies at most a shard.
type docs struct {
	seed  maphash.Seed
	depth uint     // the directory holds 1<<depth entries
	dir   []*shard // entry i is the shard of the ids whose hash ends in i; none until the first put
	n     int
	bytes int64 // what the documents count against the bound
}

type shard struct {
	depth  uint // the shard holds the ids whose hash ends in its depth bits
	m      map[string]stored
	shared bool // a find holds m: it is never written again
}

// newDocs returns an empty collection, which takes about what an empty map
// does: its first shard comes with its first document.
func newDocs() *docs { return &docs{seed: maphash.MakeSeed()} }

func (c *docs) hash(id string) uint64 { return maphash.String(c.seed, id) }

// get returns the document under id.
func (c *docs) get(id string) (stored, bool) {
	if c.dir == nil {
		return stored{}, false
	}
	d, ok := c.dir[c.hash(id)&(1<<c.depth-1)].m[id]
	return d, ok
}

// writable returns the shard of hash h, copied first if a find holds it.
func (c *docs) writable(h uint64) *shard {
	i := h & (1<<c.depth - 1)
	sh := c.dir[i]
	if !sh.shared {
		return sh
	}
	own := &shard{depth: sh.depth, m: maps.Clone(sh.m)}
	for j := i & (1<<sh.depth - 1); j < uint64(len(c.dir)); j += 1 << sh.depth {
		c.dir[j] = own
	}
	return own
}

// put stores d under id, in place of what it holds.
func (c *docs) put(id string, d stored) {
	if c.dir == nil {
		c.dir = []*shard{{m: map[string]stored{}}}
	}
	h := c.hash(id)
	sh := c.writable(h)
	if old, ok := sh.m[id]; ok {
		c.bytes -= docCost(id, old.raw)
	} else {
		c.n++
	}
	sh.m[id] = d
	c.bytes += docCost(id, d.raw)
	if len(sh.m) > shardMax && sh.depth < maxDepth {
		c.split(h, sh)
	}
}

// remove takes id out, if it is there.
func (c *docs) remove(id string) {
	if _, ok := c.get(id); !ok {
		return
	}
	h := c.hash(id)
	sh := c.writable(h)
	c.bytes -= docCost(id, sh.m[id].raw)
	c.n--
	delete(sh.m, id)
}

// split parts sh, the shard of hash h, in two by the next bit of the ids'
// hashes, doubling the directory first if sh is as deep as it.
func (c *docs) split(h uint64, sh *shard) {
	if sh.depth == c.depth {
		c.dir = append(c.dir, c.dir...)
		c.depth++
	}
	bit := uint64(1) << sh.depth
	low := &shard{depth: sh.depth + 1, m: make(map[string]stored, len(sh.m)/2)}
	high := &shard{depth: sh.depth + 1, m: make(map[string]stored, len(sh.m)/2)}
	for id, d := range sh.m {
		if c.hash(id)&bit == 0 {
			low.m[id] = d
		} else {
			high.m[id] = d
		}
	}
	for j := h & (bit - 1); j < uint64(len(c.dir)); j += bit {
		if j&bit == 0 {
			c.dir[j] = low
		} else {
			c.dir[j] = high
		}
	}
}

// snapshot returns the shards' maps as they stand, each shared from now
// on, so that the caller reads them without the store's lock.
func (c *docs) snapshot() []map[string]stored {
	var out []map[string]stored
	for i, sh := range c.dir {
		// A shard fills every entry whose low sh.depth bits are its own;
		// the first of them is below 1<<sh.depth.
		if uint64(i) < 1<<sh.depth {
			sh.shared = true
			out = append(out, sh.m)
		}
	}
	return out
}
