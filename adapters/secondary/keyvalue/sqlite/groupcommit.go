package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
)

// maxBatch bounds the sets one transaction commits, so that a set's wait
// behind others stays short however many arrive.
const maxBatch = 128

// setOp is one Set waiting for the writer.
type setOp struct {
	ctx  context.Context
	args [3]any
	err  error
	lead bool          // woken to commit the next batch, its own set first
	wake chan struct{} // one send: the set is done, or lead is true
}

// group gathers the sets that arrive while the writer commits, so that the
// next transaction commits all of them: one commit, and one take of the
// file's write lock, for many sets (a group commit). Each set takes effect
// in the transaction that carries it, between its call and its return, and
// the sets of one transaction are written in the order they arrived. No
// goroutine of its own: the caller whose set opens a batch commits it, and
// wakes the first set waiting after it to commit the next.
type group struct {
	mu      sync.Mutex
	busy    bool // a caller is committing a batch
	waiting []*setOp
}

// groupSet runs op through the group and returns its outcome.
func (s *Store) groupSet(op *setOp) error {
	g := &s.group
	g.mu.Lock()
	g.waiting = append(g.waiting, op)
	if g.busy {
		g.mu.Unlock()
		<-op.wake
		if !op.lead {
			return op.err
		}
		g.mu.Lock()
	}
	g.busy = true
	n := min(len(g.waiting), maxBatch)
	batch := make([]*setOp, n)
	copy(batch, g.waiting)
	g.waiting = append(g.waiting[:0], g.waiting[n:]...)
	g.mu.Unlock()

	s.commit(op.ctx, batch)

	g.mu.Lock()
	if len(g.waiting) > 0 {
		next := g.waiting[0]
		next.lead = true
		next.wake <- struct{}{}
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	for _, o := range batch[1:] {
		o.wake <- struct{}{}
	}
	return batch[0].err
}

// commit writes batch, which starts with the leader's own set, and sets
// each set's err. The transaction runs under the leader's context: every
// call of an engine ends with its serving period, so a fenced engine's
// batch waiting for the file's lock is stopped as a lone write would be. A
// set whose own context has ended is left out and not written. Should the
// transaction fail, each set is written alone, so that one set's failure
// is its own.
func (s *Store) commit(ctx context.Context, batch []*setOp) {
	live := batch[:0:0]
	for _, o := range batch {
		if err := o.ctx.Err(); err != nil {
			o.err = err
			continue
		}
		live = append(live, o)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		live[0].err = s.setOne(live[0])
		return
	}
	if err := s.commitAll(ctx, live); err != nil {
		for _, o := range live {
			o.err = s.setOne(o)
		}
	}
}

func (s *Store) setOne(o *setOp) error {
	_, err := s.set.ExecContext(o.ctx, o.args[:]...)
	return err
}

func (s *Store) commitAll(ctx context.Context, ops []*setOp) (err error) {
	tx, err := s.db.Write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	st := tx.StmtContext(ctx, s.set)
	for _, o := range ops {
		if _, err := st.ExecContext(ctx, o.args[:]...); err != nil {
			return fmt.Errorf("set in a batch of %d: %w", len(ops), err)
		}
	}
	return tx.Commit()
}

// newSetOp is a set of key to value with the expiry expires.
func newSetOp(ctx context.Context, key string, value []byte, expires sql.NamedArg) *setOp {
	return &setOp{
		ctx:  ctx,
		args: [3]any{sql.Named("key", key), sql.Named("value", blob(value)), expires},
		wake: make(chan struct{}, 1),
	}
}
