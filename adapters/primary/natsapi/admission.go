package natsapi

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/abi-engine/engine/internal/wire"
)

// admission hands out the host's running slots. A call takes a free slot
// at once; when none is free it waits in its caller's line (see Call.Who)
// for the next slot to free, and slots go to the callers with calls
// waiting in turn, one call each, not to the calls in the order they came.
// So one caller's waiting calls, however many, hold up another's by at
// most one call: a bystander's call runs at the latest once every caller
// ahead of it in turn has had one. No slot stays free while a call waits,
// so a caller alone uses every slot.
//
// A call of a serving period that has ended takes no place: it is refused
// at once, as leave answers the calls that waited when it ended.
//
// Waiting places are bounded in all and per caller; when all are taken, a
// call of a caller that holds fewer than the caller holding the most takes
// one of that caller's, whose newest waiting call is refused: a flood,
// even one posing as many callers, cannot keep another caller out.
type admission struct {
	most          int // slots
	mostWaiting   int // waiting places
	mostPerCaller int // waiting places one caller may hold

	mu      sync.Mutex
	running int              // slots held
	waiting int              // calls in lines
	lines   map[string]*line // by caller; only lines with calls waiting
	turns   []*line          // the lines, the one whose turn comes next first
}

// line is one caller's waiting calls, oldest first.
type line struct {
	who   string
	calls []*received
}

// admit takes a slot for r (run: the caller of admit runs r, which gives
// the slot back as it ends), or a place for r in its caller's line, or
// refuses r with err. out, when not nil, is a waiting call of another
// caller refused with outErr to make r's place; the caller of admit
// answers it.
func (a *admission) admit(r *received) (run bool, out *received, outErr, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running < a.most {
		// A free slot means no call waits: a freed slot goes to a
		// waiting call before it is free.
		a.running++
		return true, nil, nil, nil
	}
	if r.ctx.Err() != nil {
		// Its serving period has ended, and leave has taken out, or
		// will, the calls that waited then: this one, delivered late,
		// would wait for a slot alone, and a running call need not
		// heed its context to give one back.
		return false, nil, nil, fmt.Errorf("%w: the engine stopped before the call ran", wire.ErrUnavailable)
	}
	who := r.Who()
	l := a.lines[who]
	held := 0
	if l != nil {
		held = len(l.calls)
	}
	if held >= a.mostPerCaller {
		return false, nil, nil, fmt.Errorf("%w: this caller has %d calls waiting, its share of this engine's queue; try again later",
			wire.ErrUnavailable, a.mostPerCaller)
	}
	if a.waiting >= a.mostWaiting {
		fat := a.fattest()
		if len(fat.calls) <= held+1 {
			return false, nil, nil, fmt.Errorf("%w: %d calls run and %d wait, the most this engine takes; try again later",
				wire.ErrUnavailable, a.most, a.mostWaiting)
		}
		out = fat.calls[len(fat.calls)-1]
		outErr = fmt.Errorf("%w: this caller had %d calls waiting, the most of any caller, when another's needed a place; try again later",
			wire.ErrUnavailable, len(fat.calls))
		fat.calls[len(fat.calls)-1] = nil
		fat.calls = fat.calls[:len(fat.calls)-1]
		a.waiting--
	}
	if l == nil {
		l = &line{who: who}
		a.lines[who] = l
		a.turns = append(a.turns, l)
	}
	l.calls = append(l.calls, r)
	a.waiting++
	return false, out, outErr, nil
}

// fattest is the line holding the most waiting calls, the one whose turn
// comes last among equals. There is one: the caller of fattest found every
// place taken.
func (a *admission) fattest() *line {
	var fat *line
	for _, l := range a.turns {
		if fat == nil || len(l.calls) >= len(fat.calls) {
			fat = l
		}
	}
	return fat
}

// next is the call that takes the slot of a call that has ended: the
// oldest of the line whose turn it is, whose turn then passes to the next
// line. nil: no call waits, and the slot is free.
func (a *admission) next() *received {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.turns) == 0 {
		a.running--
		return nil
	}
	l := a.turns[0]
	r := l.calls[0]
	l.calls[0] = nil
	l.calls = l.calls[1:]
	a.waiting--
	a.turns = append(a.turns[:0], a.turns[1:]...)
	if len(l.calls) == 0 {
		delete(a.lines, l.who)
	} else {
		a.turns = append(a.turns, l)
	}
	return r
}

// leave takes out of their lines the waiting calls of the serving period
// period, which has ended, and returns them for their callers to be
// answered; the slots they waited for stay as they are.
func (a *admission) leave(period context.Context) []*received {
	a.mu.Lock()
	defer a.mu.Unlock()
	var left []*received
	for _, l := range a.turns {
		l.calls = slices.DeleteFunc(l.calls, func(r *received) bool {
			if r.ctx == period {
				left = append(left, r)
				return true
			}
			return false
		})
		if len(l.calls) == 0 {
			delete(a.lines, l.who)
		}
	}
	a.turns = slices.DeleteFunc(a.turns, func(l *line) bool { return len(l.calls) == 0 })
	a.waiting -= len(left)
	return left
}
