package contracttests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/abi-engine/engine/ports"
)

// kvLinearInput is one call on the raced key: value is unique to a write,
// and for delete_if_value the value the caller last read.
type kvLinearInput struct {
	op    string // "get", "exists", "set", "set_if_absent", "delete" or "delete_if_value"
	value string
}

// kvLinearOutput is a call's answer: for get, found and value; for exists,
// set_if_absent and the deletes, ok.
type kvLinearOutput struct {
	found bool
	value string
	ok    bool
}

// kvLinearState is the key as a sequence of calls leaves it.
type kvLinearState struct {
	present bool
	value   string
}

// kvLinearModel is the keyvalue store's promise for one key, as a
// sequential specification.
var kvLinearModel = linearModel(
	func(s kvLinearState, in kvLinearInput, out kvLinearOutput) (bool, kvLinearState) {
		switch in.op {
		case "get":
			return out.found == s.present && out.value == s.value, s
		case "exists":
			return out.ok == s.present, s
		case "set":
			return true, kvLinearState{present: true, value: in.value}
		case "set_if_absent":
			if s.present {
				return !out.ok, s
			}
			return out.ok, kvLinearState{present: true, value: in.value}
		case "delete":
			return out.ok == s.present, kvLinearState{}
		case "delete_if_value":
			if s.present && s.value == in.value {
				return out.ok, kvLinearState{}
			}
			return !out.ok, s
		}
		return false, s
	},
	func(in kvLinearInput, out kvLinearOutput) string {
		switch in.op {
		case "get":
			if !out.found {
				return "get() -> not found"
			}
			return "get() -> " + out.value
		case "set":
			return fmt.Sprintf("set(%s)", in.value)
		case "exists", "delete":
			return fmt.Sprintf("%s() -> %t", in.op, out.ok)
		}
		return fmt.Sprintf("%s(%s) -> %t", in.op, in.value, out.ok)
	},
)

// kvWritesAreLinearizable races callers on two handles over one key: sets,
// set_if_absent, deletes, deletes of the value each caller last read,
// gets and exists. Each answer must be one the key could give at a single
// moment within its call, so a read never goes back to a value a
// finished write replaced, and a conditional write decides on the value
// the key holds when it takes effect.
func kvWritesAreLinearizable(t *testing.T, open func(t *testing.T) ports.KeyValue) {
	handles := []ports.KeyValue{open(t), open(t)}
	checkLinearizable(t, "Set, SetIfAbsent, Delete, DeleteIfValue, Get and Exists racing on one key", kvLinearModel, handles,
		func(w int, s ports.KeyValue, rng *rand.Rand) linearCaller {
			var last string // the value this caller last read or wrote
			return func(ctx context.Context, i int) (any, any, error) {
				var (
					in  kvLinearInput
					out kvLinearOutput
					err error
				)
				switch n := rng.IntN(20); {
				case n < 6:
					in.op = "get"
					var v []byte
					v, err = s.Get(ctx, "k")
					if errors.Is(err, ports.ErrNotFound) {
						err = nil
					} else if err == nil {
						out.found, out.value, last = true, string(v), string(v)
					}
				case n < 8:
					in.op = "exists"
					out.ok, err = s.Exists(ctx, "k")
				case n < 12:
					in.op, in.value = "set", fmt.Sprintf("w%d.%d", w, i)
					if err = s.Set(ctx, "k", []byte(in.value), 0); err == nil {
						last = in.value
					}
				case n < 15:
					in.op, in.value = "set_if_absent", fmt.Sprintf("w%d.%d", w, i)
					out.ok, err = s.SetIfAbsent(ctx, "k", []byte(in.value), 0)
					if out.ok {
						last = in.value
					}
				case n < 17:
					in.op = "delete"
					out.ok, err = s.Delete(ctx, "k")
				default:
					in.op, in.value = "delete_if_value", last
					out.ok, err = s.DeleteIfValue(ctx, "k", []byte(last))
				}
				return in, out, err
			}
		})
}
