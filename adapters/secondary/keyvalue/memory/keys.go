package memory

import (
	"slices"
	"sort"
)

// runMax is the most keys a run of the index holds: an insert or a delete
// moves at most a run's keys, and the runs themselves are about
// 2*n/runMax, few enough to move as a whole when one splits or goes.
const runMax = 512

// keyIndex is the store's keys in byte order, cut into sorted runs, each
// of 1 to runMax keys and all of a run before the next. A page of
// ListKeys starts from a binary search and reads on from there, so a
// listing holds the store's lock for its page, not for a walk of every
// key. The strings are the map's own keys; the index adds a string header
// a key.
type keyIndex struct {
	runs [][]string
}

// search returns the place of the first key at or after key: the run, and
// the index in it; run is len(x.runs) when every key is before key.
func (x *keyIndex) search(key string) (run, at int) {
	run = sort.Search(len(x.runs), func(i int) bool { r := x.runs[i]; return r[len(r)-1] >= key })
	if run == len(x.runs) {
		return run, 0
	}
	return run, sort.SearchStrings(x.runs[run], key)
}

// insert adds key, which the index does not hold.
func (x *keyIndex) insert(key string) {
	if len(x.runs) == 0 {
		x.runs = [][]string{{key}}
		return
	}
	run, at := x.search(key)
	if run == len(x.runs) {
		run = len(x.runs) - 1
		at = len(x.runs[run])
	}
	r := slices.Insert(x.runs[run], at, key)
	if len(r) <= runMax {
		x.runs[run] = r
		return
	}
	half := len(r) / 2
	upper := slices.Clone(r[half:])
	clear(r[half:])
	x.runs[run] = r[:half]
	x.runs = slices.Insert(x.runs, run+1, upper)
}

// remove takes key out of the index, if it holds it. A run left with
// fewer than a quarter of runMax keys joins a neighbour it fits in, so
// that deletes cannot leave the index with many nearly empty runs.
func (x *keyIndex) remove(key string) {
	run, at := x.search(key)
	if run == len(x.runs) || x.runs[run][at] != key {
		return
	}
	r := slices.Delete(x.runs[run], at, at+1)
	if len(r) == 0 {
		x.runs = slices.Delete(x.runs, run, run+1)
		return
	}
	x.runs[run] = r
	if len(r) >= runMax/4 {
		return
	}
	switch {
	case run+1 < len(x.runs) && len(r)+len(x.runs[run+1]) <= runMax:
		x.runs[run] = append(r, x.runs[run+1]...)
		x.runs = slices.Delete(x.runs, run+1, run+2)
	case run > 0 && len(x.runs[run-1])+len(r) <= runMax:
		x.runs[run-1] = append(x.runs[run-1], r...)
		x.runs = slices.Delete(x.runs, run, run+1)
	}
}

// ascend calls f with the keys after from (at or after it when inclusive),
// in order, until f returns false. f must not change the index.
func (x *keyIndex) ascend(from string, inclusive bool, f func(key string) bool) {
	run, at := x.search(from)
	for ; run < len(x.runs); run, at = run+1, 0 {
		for _, k := range x.runs[run][at:] {
			if !inclusive && k == from {
				continue
			}
			if !f(k) {
				return
			}
		}
	}
}
