package contracttests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// docLinearInput is one call on the raced document: a get, a put of a
// value unique to the call, or a delete; a put or delete with cond holds
// only at ifVersion (0: the document must be missing).
type docLinearInput struct {
	op        string // "get", "put" or "delete"
	cond      bool
	ifVersion uint64
	value     string
}

// docLinearOutput is a call's answer: the document read or written, or a
// refusal.
type docLinearOutput struct {
	found    bool
	version  uint64
	value    string
	conflict bool
	notFound bool
}

// docLinearState is the document as a sequence of calls leaves it:
// highest is the highest version it ever had, deleted or not.
type docLinearState struct {
	present bool
	version uint64
	value   string
	highest uint64
}

// docLinearModel is the document store's promise for one document, as a
// sequential specification: every history of calls must be explained by
// some order of them, each taking effect at one moment between its call
// and its return. Versions are the store's to choose, above every one the
// document had, deleted or not (a version names one state for good); a
// put must report the one a later get sees.
var docLinearModel = linearModel(
	func(s docLinearState, in docLinearInput, out docLinearOutput) (bool, docLinearState) {
		holds := !in.cond || s.present == (in.ifVersion != 0) && (!s.present || s.version == in.ifVersion)
		switch in.op {
		case "get":
			if !s.present {
				return out.notFound, s
			}
			return out.found && out.version == s.version && out.value == s.value, s
		case "put":
			if !holds {
				return out.conflict, s
			}
			// A put moves the version past every one the document had: a
			// store that wrote without raising it, or that gave a version
			// again after a delete, would let a put conditioned on the old
			// version overwrite this one unseen.
			return out.found && out.version > s.highest, docLinearState{present: true, version: out.version, value: in.value, highest: out.version}
		case "delete":
			switch {
			case !s.present:
				return out.notFound, s
			case !holds:
				return out.conflict, s
			}
			return !out.conflict && !out.notFound && !out.found, docLinearState{highest: s.highest}
		}
		return false, s
	},
	func(in docLinearInput, out docLinearOutput) string {
		call := in.op + "()"
		switch {
		case in.op == "put" && in.cond:
			call = fmt.Sprintf("put(%s, if v%d)", in.value, in.ifVersion)
		case in.op == "put":
			call = fmt.Sprintf("put(%s)", in.value)
		case in.op == "delete" && in.cond:
			call = fmt.Sprintf("delete(if v%d)", in.ifVersion)
		}
		switch {
		case out.conflict:
			return call + " -> conflict"
		case out.notFound:
			return call + " -> not found"
		case in.op == "get":
			return fmt.Sprintf("%s -> v%d %s", call, out.version, out.value)
		case in.op == "put":
			return fmt.Sprintf("%s -> v%d", call, out.version)
		}
		return call + " -> ok"
	},
)

// docConditionalWritesAreLinearizable races callers on two handles over
// one document: conditional puts and deletes at the version each caller
// last saw, some unconditional ones, and gets. Whatever the interleaving,
// each answer must be one the document could give at a single moment
// within its call: a delete that finds nothing at the version it wants
// must not report a conflict because a put recreated the document while
// the delete looked for a reason.
func docConditionalWritesAreLinearizable(t *testing.T, open func(t *testing.T) ports.DocumentStore) {
	handles := []ports.DocumentStore{open(t), open(t)}
	docEnsure(t, handles[0], "c")
	checkLinearizable(t, "Put, Get and Delete racing on one document", docLinearModel, handles, func(w int, s ports.DocumentStore, rng *rand.Rand) linearCaller {
		var (
			known uint64 // the version this caller last saw; 0: missing
			stale bool   // its last write was refused: read first
		)
		return func(ctx context.Context, i int) (any, any, error) {
			in := docLinearInput{cond: true, ifVersion: known}
			switch n := rng.IntN(20); {
			case stale || n < 6:
				in.op = "get"
			case n < 14:
				in.op, in.value = "put", fmt.Sprintf("w%d.%d", w, i)
				in.cond = n < 13
			default:
				in.op = "delete"
				in.cond = n < 19
			}
			cond := ports.Cond{}
			if in.cond {
				cond = ports.IfVersion(in.ifVersion)
			}
			var (
				out docLinearOutput
				err error
			)
			switch in.op {
			case "get":
				var d ports.Document
				if d, err = s.Get(ctx, "c", "d"); err == nil {
					v, _ := d.Data["v"].(string)
					out = docLinearOutput{found: true, version: d.Version, value: v}
				}
			case "put":
				var d ports.Document
				if d, err = s.Put(ctx, "c", "d", map[string]any{"v": in.value}, cond); err == nil {
					out = docLinearOutput{found: true, version: d.Version}
				}
			case "delete":
				err = s.Delete(ctx, "c", "d", cond)
			}
			switch {
			case errors.Is(err, ports.ErrConflict):
				out.conflict, stale, err = true, true, nil
			case errors.Is(err, ports.ErrNotFound):
				out.notFound, known, stale, err = true, 0, false, nil
			case err != nil:
			case in.op == "delete":
				known = 0
			default:
				known, stale = out.version, false
			}
			return in, out, err
		}
	})
}
