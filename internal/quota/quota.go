// Package quota bounds what many holders take of one amount: the whole of
// it, and a share for each holder, so that no holder can take what the
// others need. The engine bounds the bytes of bodies and parked replies
// this way, in all and by caller.
package quota

import (
	"fmt"
	"sync"
)

// Quota is an amount that holders take parts of and give back. Its zero
// value holds nothing; use New.
type Quota struct {
	total, share int64

	mu   sync.Mutex
	held int64
	by   map[string]int64
}

// New is a quota of total in all and of share for any one holder.
func New(total, share int64) *Quota {
	return &Quota{total: total, share: share, by: map[string]int64{}}
}

// Over is a take refused: it would have passed Bound, the holder's share
// (Share) or the whole, under which Held was taken already.
type Over struct {
	Holder string
	Share  bool
	Held   int64
	Asked  int64
	Bound  int64
}

func (o *Over) Error() string {
	if o.Share {
		return fmt.Sprintf("%d more would pass the share of %d one holder takes (%s holds %d)", o.Asked, o.Bound, o.Holder, o.Held)
	}
	return fmt.Sprintf("%d more would pass the %d of all holders (%d are held)", o.Asked, o.Bound, o.Held)
}

// Take takes n for holder, or takes nothing and returns an *Over naming
// the bound it would pass. The holder's share is checked first, so a
// holder past it is told so even when the whole is short too.
func (q *Quota) Take(holder string, n int64) error {
	if n == 0 {
		// Nothing is taken, so nothing is kept for holder: Give of
		// nothing does nothing, and a holder recorded here would stay.
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if held := q.by[holder]; held+n > q.share {
		return &Over{Holder: holder, Share: true, Held: held, Asked: n, Bound: q.share}
	}
	if q.held+n > q.total {
		return &Over{Holder: holder, Held: q.held, Asked: n, Bound: q.total}
	}
	q.held += n
	q.by[holder] += n
	return nil
}

// Give gives back n that holder took.
func (q *Quota) Give(holder string, n int64) {
	if n == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held -= n
	if q.by[holder] -= n; q.by[holder] <= 0 {
		delete(q.by, holder)
	}
}

// Held is how much all holders hold.
func (q *Quota) Held() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held
}
