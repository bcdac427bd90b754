package contracttests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The callers a linearizability case races, and how many calls each makes.
const (
	linearCallers = 6
	linearCalls   = 200
)

// linearCaller makes one call on the raced key and says what it asked and
// what it was answered. An error the contract allows is part of the
// answer; any other error ends the case.
type linearCaller func(ctx context.Context, i int) (input, output any, err error)

// linearModel is the porcupine model of step, a sequential specification
// of one key over typed states, calls and answers, whose zero state is
// the key before any call; describe prints a call and its answer.
func linearModel[S, I, O any](step func(s S, in I, out O) (bool, S), describe func(in I, out O) string) porcupine.Model {
	return porcupine.Model{
		Init:              func() any { var s S; return s },
		Step:              func(state, input, output any) (bool, any) { return step(state.(S), input.(I), output.(O)) },
		DescribeOperation: func(input, output any) string { return describe(input.(I), output.(O)) },
	}
}

// checkLinearizable races linearCallers callers, made by caller over the
// handles in turn, each with a random source of its own, and checks with porcupine that one order of their calls,
// each taking effect at a single moment between its call and its return,
// explains every answer under model. what names the race in a failure.
func checkLinearizable[S any](t *testing.T, what string, model porcupine.Model, handles []S, caller func(w int, s S, rng *rand.Rand) linearCaller) {
	t.Helper()
	start := time.Now()
	seed := uint64(start.UnixNano())
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		failed  bool
		wg      sync.WaitGroup
	)
	for w := range linearCallers {
		call := caller(w, handles[w%len(handles)], rand.New(rand.NewPCG(seed, uint64(w))))
		wg.Go(func() {
			for i := range linearCalls {
				ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
				at := time.Since(start)
				in, out, err := call(ctx, i)
				ret := time.Since(start)
				cancel()
				mu.Lock()
				if err != nil {
					failed = true
					mu.Unlock()
					t.Errorf("%s: caller %d: %s: %v", what, w, model.DescribeOperation(in, out), err)
					return
				}
				history = append(history, porcupine.Operation{ClientId: w, Input: in, Output: out, Call: int64(at), Return: int64(ret)})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed {
		return
	}
	res, info := porcupine.CheckOperationsVerbose(model, history, time.Minute)
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Errorf("%s: the checker could not decide on %d calls in a minute", what, len(history))
	default:
		t.Errorf("%s: no order of the %d calls within their times explains every answer; "+
			"the calls around the first that no order fits, by call time:\n%s", what, len(history), linearBreak(model, history, &info))
	}
}

// linearBreak lists the calls near the first call that the longest order
// the checker found could not take, so a failure shows the race itself.
func linearBreak(model porcupine.Model, history []porcupine.Operation, info *porcupine.LinearizationInfo) string {
	explained := map[int]bool{}
	for _, part := range info.PartialLinearizations() {
		var longest []int
		for _, order := range part {
			if len(order) > len(longest) {
				longest = order
			}
		}
		for _, i := range longest {
			explained[i] = true
		}
	}
	order := make([]int, len(history))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return int(history[a].Call - history[b].Call) })
	first := -1
	for _, i := range order {
		if !explained[i] {
			first = i
			break
		}
	}
	if first < 0 {
		return "(the checker named none)"
	}
	from, to := history[first].Call-int64(5*time.Millisecond), history[first].Return+int64(time.Millisecond)
	var b strings.Builder
	for _, i := range order {
		o := history[i]
		if o.Return < from || o.Call > to {
			continue
		}
		mark := " "
		if i == first {
			mark = ">"
		}
		fmt.Fprintf(&b, "%s caller %d, %v to %v: %s\n", mark, o.ClientId, time.Duration(o.Call), time.Duration(o.Return),
			model.DescribeOperation(o.Input, o.Output))
	}
	return b.String()
}
