package linearizable_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/anishathalye/porcupine"
)

// The sequential models the history is checked against: one for the
// keyvalue service and one for the document service, each partitioned by
// key, so a partition's state is one key's.

type kvOp int

const (
	kvGet kvOp = iota
	kvSet
	kvSetIfAbsent
	kvDelete
)

func (o kvOp) String() string {
	return [...]string{"get", "set", "set_if_absent", "delete"}[o]
}

// kvInput is one keyvalue call; value is unique to the write.
type kvInput struct {
	op    kvOp
	key   string
	value string
}

// kvOutput is its answer: for get, found and value; for set_if_absent
// and delete, ok (stored, deleted). unknown: a write that may or may not
// have happened.
type kvOutput struct {
	found   bool
	value   string
	ok      bool
	unknown bool
}

// kvState is one key's: present with a value, or absent.
type kvState struct {
	present bool
	value   string
}

func (s kvState) String() string {
	if !s.present {
		return "absent"
	}
	return s.value
}

var kvModel = porcupine.Model{
	Partition: partitionBy(func(in any) string { return in.(kvInput).key }),
	Init:      func() any { return kvState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(kvState), input.(kvInput), output.(kvOutput)
		switch in.op {
		case kvGet:
			return out.found == s.present && (!s.present || out.value == s.value), s
		case kvSet:
			return true, kvState{present: true, value: in.value}
		case kvSetIfAbsent:
			if s.present {
				return out.unknown || !out.ok, s
			}
			return out.unknown || out.ok, kvState{present: true, value: in.value}
		case kvDelete:
			return out.unknown || out.ok == s.present, kvState{}
		}
		panic(fmt.Sprintf("keyvalue model: operation %d", in.op))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		call := fmt.Sprintf("%s(%s)", in.op, in.key)
		if in.op != kvGet && in.op != kvDelete {
			call = fmt.Sprintf("%s(%s, %s)", in.op, in.key, in.value)
		}
		switch {
		case out.unknown:
			return call + " -> ?"
		case in.op == kvGet && !out.found:
			return call + " -> not found"
		case in.op == kvGet:
			return call + " -> " + out.value
		case in.op == kvSet:
			return call + " -> ok"
		}
		return fmt.Sprintf("%s -> %t", call, out.ok)
	},
	DescribeState:             func(state any) string { return state.(kvState).String() },
	DescribeOperationMetadata: describeMetadata,
}

type docOp int

const (
	docGet docOp = iota
	docPut
	docDelete
)

func (o docOp) String() string { return [...]string{"get", "put", "delete"}[o] }

// docInput is one document call; put and delete are conditional on
// ifVersion (0: the document must not exist), value is unique to the put.
type docInput struct {
	op        docOp
	id        string
	ifVersion uint64
	value     string
}

// docOutput is its answer: the document read or written (found, version,
// value), or a refusal (conflict, notFound). unknown: a write that may or
// may not have happened.
type docOutput struct {
	found    bool
	version  uint64
	value    string
	conflict bool
	notFound bool
	unknown  bool
}

// docState is one document's. A version names one state of the document
// for good, so each write's version is above every one it had (highest),
// deleted or not; which it is, a store chooses. version is 0 after a write
// of unknown outcome, until a read or a write shows it.
type docState struct {
	present bool
	version uint64
	value   string
	highest uint64
}

func (s docState) String() string {
	if !s.present {
		return fmt.Sprintf("absent, after v%d", s.highest)
	}
	return fmt.Sprintf("v%d %s", s.version, s.value)
}

// written is the state after a write that took effect and answered out.
func (s docState) written(value string, out docOutput) docState {
	next := docState{present: true, value: value, highest: s.highest}
	if !out.unknown {
		next.version, next.highest = out.version, out.version
	}
	return next
}

var docModel = porcupine.Model{
	Partition: partitionBy(func(in any) string { return in.(docInput).id }),
	Init:      func() any { return docState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(docState), input.(docInput), output.(docOutput)
		// known: the version is the one ifVersion names, or another, or
		// (after a write of unknown outcome) either. differs: it is not
		// the one ifVersion names; an unknown version is above every one
		// the document had, so it differs from each of them.
		known := s.version != 0
		differs := known && s.version != in.ifVersion || !known && in.ifVersion <= s.highest
		if in.op != docGet && in.ifVersion != 0 && s.present && !known && !differs {
			// The unread version may be ifVersion. A conflict says it
			// is not; a write that takes effect says it is: the document
			// had that version, and what follows is held to it.
			if out.conflict {
				return true, s
			}
			s.version, s.highest = in.ifVersion, in.ifVersion
			known = true
		}
		switch in.op {
		case docGet:
			if !s.present {
				return out.notFound, s
			}
			if !out.found || out.value != s.value || known && out.version != s.version || !known && out.version <= s.highest {
				return false, s
			}
			s.version, s.highest = out.version, out.version
			return true, s
		case docPut:
			if in.ifVersion == 0 && s.present || in.ifVersion != 0 && (!s.present || differs) {
				return out.unknown || out.conflict, s
			}
			return out.unknown || out.found && out.version > s.highest, s.written(in.value, out)
		case docDelete:
			switch {
			case !s.present:
				return out.unknown || out.notFound, s
			case differs:
				return out.unknown || out.conflict, s
			}
			return out.unknown || !out.conflict && !out.notFound, docState{highest: s.highest}
		}
		panic(fmt.Sprintf("document model: operation %d", in.op))
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(docInput), output.(docOutput)
		call := fmt.Sprintf("%s(%s)", in.op, in.id)
		switch in.op {
		case docPut:
			call = fmt.Sprintf("put(%s, %s, if v%d)", in.id, in.value, in.ifVersion)
		case docDelete:
			call = fmt.Sprintf("delete(%s, if v%d)", in.id, in.ifVersion)
		}
		switch {
		case out.unknown:
			return call + " -> ?"
		case out.conflict:
			return call + " -> conflict"
		case out.notFound:
			return call + " -> not found"
		case in.op == docGet:
			return fmt.Sprintf("%s -> v%d %s", call, out.version, out.value)
		case in.op == docPut:
			return fmt.Sprintf("%s -> v%d", call, out.version)
		}
		return call + " -> ok"
	},
	DescribeState:             func(state any) string { return state.(docState).String() },
	DescribeOperationMetadata: describeMetadata,
}

// partitionBy splits a history by the key of each operation's input.
func partitionBy(key func(input any) string) func([]porcupine.Operation) [][]porcupine.Operation {
	return func(history []porcupine.Operation) [][]porcupine.Operation {
		index := map[string]int{}
		var parts [][]porcupine.Operation
		for _, op := range history {
			k := key(op.Input)
			i, ok := index[k]
			if !ok {
				i = len(parts)
				index[k] = i
				parts = append(parts, nil)
			}
			parts[i] = append(parts[i], op)
		}
		return parts
	}
}

// callInfo is what the visualization shows of a call besides its input
// and output: which client made it and, for an unknown outcome, why.
type callInfo struct {
	client int
	err    string
}

func describeMetadata(m any) string {
	info, ok := m.(callInfo)
	if !ok {
		return ""
	}
	if info.err == "" {
		return fmt.Sprintf("client %d", info.client)
	}
	return fmt.Sprintf("client %d: %s", info.client, info.err)
}

// op builds an operation; ret math.MaxInt64 is an outcome still unknown.
func op(client int, call, ret int64, in, out any) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out, Metadata: callInfo{client: client}}
}

// The checker must be able to say no: each history here is one a store
// that broke a promise would produce, and is rejected; its variant that
// keeps the promise is accepted.
func TestTheModelsRejectWhatAStoreMustNotDo(t *testing.T) {
	const never = math.MaxInt64
	cases := []struct {
		name    string
		model   porcupine.Model
		bad     []porcupine.Operation
		allowed []porcupine.Operation
	}{
		{
			name:  "a stale read after a write completed",
			model: kvModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, kvInput{op: kvSet, key: "k", value: "a"}, kvOutput{}),
				op(0, 20, 30, kvInput{op: kvSet, key: "k", value: "b"}, kvOutput{}),
				op(1, 40, 50, kvInput{op: kvGet, key: "k"}, kvOutput{found: true, value: "a"}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, kvInput{op: kvSet, key: "k", value: "a"}, kvOutput{}),
				op(0, 20, 45, kvInput{op: kvSet, key: "k", value: "b"}, kvOutput{}),
				op(1, 40, 50, kvInput{op: kvGet, key: "k"}, kvOutput{found: true, value: "a"}),
			},
		},
		{
			name:  "two set_if_absent both stored",
			model: kvModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, kvInput{op: kvSetIfAbsent, key: "k", value: "a"}, kvOutput{ok: true}),
				op(1, 0, 10, kvInput{op: kvSetIfAbsent, key: "k", value: "b"}, kvOutput{ok: true}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, kvInput{op: kvSetIfAbsent, key: "k", value: "a"}, kvOutput{ok: true}),
				op(1, 0, 10, kvInput{op: kvSetIfAbsent, key: "k", value: "b"}, kvOutput{ok: false}),
			},
		},
		{
			// A write answered 503 is left out of the history; if it
			// happened anyway, a read shows a value no recorded call wrote.
			name:  "a write refused with 503 that took effect",
			model: kvModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, kvInput{op: kvSet, key: "k", value: "a"}, kvOutput{}),
				op(1, 20, 30, kvInput{op: kvGet, key: "k"}, kvOutput{found: true, value: "refused"}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, kvInput{op: kvSet, key: "k", value: "a"}, kvOutput{}),
				op(2, 5, never, kvInput{op: kvSet, key: "k", value: "interrupted"}, kvOutput{unknown: true}),
				op(1, 20, 30, kvInput{op: kvGet, key: "k"}, kvOutput{found: true, value: "interrupted"}),
				op(1, 40, 50, kvInput{op: kvGet, key: "k"}, kvOutput{found: true, value: "interrupted"}),
			},
		},
		{
			name:  "a write of unknown outcome seen, then undone",
			model: kvModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, kvInput{op: kvSet, key: "k", value: "a"}, kvOutput{}),
				op(2, 5, never, kvInput{op: kvSet, key: "k", value: "b"}, kvOutput{unknown: true}),
				op(1, 20, 30, kvInput{op: kvGet, key: "k"}, kvOutput{found: true, value: "b"}),
				op(1, 40, 50, kvInput{op: kvGet, key: "k"}, kvOutput{found: true, value: "a"}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, kvInput{op: kvSet, key: "k", value: "a"}, kvOutput{}),
				op(2, 5, never, kvInput{op: kvSet, key: "k", value: "b"}, kvOutput{unknown: true}),
				op(1, 20, 30, kvInput{op: kvGet, key: "k"}, kvOutput{found: true, value: "a"}),
				op(1, 40, 50, kvInput{op: kvGet, key: "k"}, kvOutput{found: true, value: "b"}),
			},
		},
		{
			name:  "a delete that reports nothing to delete after a set",
			model: kvModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, kvInput{op: kvSet, key: "k", value: "a"}, kvOutput{}),
				op(1, 20, 30, kvInput{op: kvDelete, key: "k"}, kvOutput{ok: false}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, kvInput{op: kvSet, key: "k", value: "a"}, kvOutput{}),
				op(1, 20, 30, kvInput{op: kvDelete, key: "k"}, kvOutput{ok: true}),
				op(1, 40, 50, kvInput{op: kvGet, key: "k"}, kvOutput{found: false}),
			},
		},
		{
			name:  "two compare-and-sets from one version both won",
			model: docModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, docInput{op: docPut, id: "d", value: "a"}, docOutput{found: true, version: 1}),
				op(0, 20, 30, docInput{op: docPut, id: "d", ifVersion: 1, value: "b"}, docOutput{found: true, version: 2}),
				op(1, 20, 30, docInput{op: docPut, id: "d", ifVersion: 1, value: "c"}, docOutput{found: true, version: 2}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, docInput{op: docPut, id: "d", value: "a"}, docOutput{found: true, version: 1}),
				op(0, 20, 30, docInput{op: docPut, id: "d", ifVersion: 1, value: "b"}, docOutput{found: true, version: 2}),
				op(1, 20, 30, docInput{op: docPut, id: "d", ifVersion: 1, value: "c"}, docOutput{conflict: true}),
			},
		},
		{
			name:  "a document read at an old version",
			model: docModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, docInput{op: docPut, id: "d", value: "a"}, docOutput{found: true, version: 1}),
				op(0, 20, 30, docInput{op: docPut, id: "d", ifVersion: 1, value: "b"}, docOutput{found: true, version: 2}),
				op(1, 40, 50, docInput{op: docGet, id: "d"}, docOutput{found: true, version: 1, value: "a"}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, docInput{op: docPut, id: "d", value: "a"}, docOutput{found: true, version: 1}),
				op(0, 20, 30, docInput{op: docPut, id: "d", ifVersion: 1, value: "b"}, docOutput{found: true, version: 2}),
				op(1, 40, 50, docInput{op: docGet, id: "d"}, docOutput{found: true, version: 2, value: "b"}),
				op(1, 60, 70, docInput{op: docDelete, id: "d", ifVersion: 2}, docOutput{}),
				op(1, 80, 90, docInput{op: docGet, id: "d"}, docOutput{notFound: true}),
			},
		},
		{
			// A writer still holding version 1 would overwrite the new
			// document; versions need not be consecutive.
			name:  "a version given again after a delete",
			model: docModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, docInput{op: docPut, id: "d", value: "a"}, docOutput{found: true, version: 1}),
				op(0, 20, 30, docInput{op: docDelete, id: "d", ifVersion: 1}, docOutput{}),
				op(1, 40, 50, docInput{op: docPut, id: "d", value: "b"}, docOutput{found: true, version: 1}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, docInput{op: docPut, id: "d", value: "a"}, docOutput{found: true, version: 1}),
				op(0, 20, 30, docInput{op: docDelete, id: "d", ifVersion: 1}, docOutput{}),
				op(1, 40, 50, docInput{op: docPut, id: "d", value: "b"}, docOutput{found: true, version: 7}),
				op(1, 60, 70, docInput{op: docPut, id: "d", ifVersion: 7, value: "c"}, docOutput{found: true, version: 9}),
			},
		},
		{
			// After a put of unknown outcome the version is not known until
			// a read shows it; from then on it is held to that.
			name:  "a version read after a write of unknown outcome, then another",
			model: docModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, docInput{op: docPut, id: "d", value: "a"}, docOutput{found: true, version: 1}),
				op(2, 5, never, docInput{op: docPut, id: "d", ifVersion: 1, value: "b"}, docOutput{unknown: true}),
				op(1, 20, 30, docInput{op: docGet, id: "d"}, docOutput{found: true, version: 4, value: "b"}),
				op(1, 40, 50, docInput{op: docGet, id: "d"}, docOutput{found: true, version: 5, value: "b"}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, docInput{op: docPut, id: "d", value: "a"}, docOutput{found: true, version: 1}),
				op(2, 5, never, docInput{op: docPut, id: "d", ifVersion: 1, value: "b"}, docOutput{unknown: true}),
				op(1, 20, 30, docInput{op: docGet, id: "d"}, docOutput{found: true, version: 4, value: "b"}),
				op(1, 40, 50, docInput{op: docGet, id: "d"}, docOutput{found: true, version: 4, value: "b"}),
			},
		},
	}
	for _, c := range cases {
		if porcupine.CheckOperations(c.model, c.bad) {
			t.Errorf("%s: accepted", c.name)
		}
		if !porcupine.CheckOperations(c.model, c.allowed) {
			t.Errorf("%s: its allowed variant was rejected", c.name)
		}
	}
}

// After a write of unknown outcome the document's version is not known,
// but it is above every version the document had: a put or delete at one
// of those (or at 0, "must not exist") must conflict. Were they let win,
// the model would pass a store that gives a version twice, whenever the
// put that made the document again had an unknown outcome.
func TestAnUnknownVersionIsAboveEveryEarlierOne(t *testing.T) {
	const never = math.MaxInt64
	prefix := func() []porcupine.Operation {
		return []porcupine.Operation{
			op(0, 0, 10, docInput{op: docPut, id: "d", value: "a"}, docOutput{found: true, version: 1}),
			op(1, 20, 30, docInput{op: docDelete, id: "d", ifVersion: 1}, docOutput{}),
			op(2, 40, never, docInput{op: docPut, id: "d", value: "b"}, docOutput{unknown: true}),
		}
	}
	cases := []struct {
		name       string
		bad, after []porcupine.Operation
	}{
		{
			name: "a put if v1 after the document was deleted and made again wins (version 1 given again)",
			bad: []porcupine.Operation{
				op(0, 60, 70, docInput{op: docPut, id: "d", ifVersion: 1, value: "c"}, docOutput{found: true, version: 2}),
				op(1, 80, 90, docInput{op: docGet, id: "d"}, docOutput{found: true, version: 2, value: "c"}),
			},
		},
		{
			name: "a delete if v1 after the document was deleted and made again wins",
			bad: []porcupine.Operation{
				op(0, 60, 70, docInput{op: docDelete, id: "d", ifVersion: 1}, docOutput{}),
				op(1, 80, 90, docInput{op: docGet, id: "d"}, docOutput{notFound: true}),
			},
		},
		{
			name: "a delete if v0 (must not exist) of a document made again wins",
			bad: []porcupine.Operation{
				op(0, 60, 70, docInput{op: docDelete, id: "d", ifVersion: 0}, docOutput{}),
				op(1, 80, 90, docInput{op: docGet, id: "d"}, docOutput{notFound: true}),
			},
		},
	}
	for _, c := range cases {
		if porcupine.CheckOperations(docModel, append(prefix(), c.bad...)) {
			t.Errorf("%s: accepted", c.name)
		}
	}
	// Still allowed: the unknown put's version is read, then written at.
	allowed := append(prefix(),
		op(3, 50, 55, docInput{op: docGet, id: "d"}, docOutput{found: true, version: 6, value: "b"}),
		op(3, 60, 70, docInput{op: docPut, id: "d", ifVersion: 6, value: "c"}, docOutput{found: true, version: 8}),
	)
	if !porcupine.CheckOperations(docModel, allowed) {
		t.Errorf("the allowed history was rejected")
	}
	// And a put if a version above every earlier one, with the unknown
	// version unread, may win (it may be the unknown one).
	allowed = append(prefix(),
		op(0, 60, 70, docInput{op: docPut, id: "d", ifVersion: 6, value: "c"}, docOutput{found: true, version: 8}),
	)
	if !porcupine.CheckOperations(docModel, allowed) {
		t.Errorf("the allowed history with ifVersion above all was rejected")
	}
}

// A put or delete conditional on a version above every one the document
// had, that wins while the version of a write of unknown outcome is
// unread, shows that version: the document had it. The version a put
// gives then is above it, and after a delete no later put may give it
// again. Were the version left unknown, the model would pass a store that
// gives a version twice, or one below a version the document had.
func TestAWriteThatWinsAtAnUnreadVersionShowsThatVersion(t *testing.T) {
	const never = math.MaxInt64
	prefix := func() []porcupine.Operation {
		return []porcupine.Operation{
			op(0, 0, 10, docInput{op: docPut, id: "d", value: "a"}, docOutput{found: true, version: 1}),
			op(1, 20, 30, docInput{op: docDelete, id: "d", ifVersion: 1}, docOutput{}),
			op(2, 40, never, docInput{op: docPut, id: "d", value: "b"}, docOutput{unknown: true}),
		}
	}
	cases := []struct {
		name         string
		bad, allowed []porcupine.Operation
	}{
		{
			name: "a put if v6 that wins is given v5",
			bad: []porcupine.Operation{
				op(0, 60, 70, docInput{op: docPut, id: "d", ifVersion: 6, value: "c"}, docOutput{found: true, version: 5}),
			},
			allowed: []porcupine.Operation{
				op(0, 60, 70, docInput{op: docPut, id: "d", ifVersion: 6, value: "c"}, docOutput{found: true, version: 7}),
			},
		},
		{
			name: "a put if v6 that wins is given v6",
			bad: []porcupine.Operation{
				op(0, 60, 70, docInput{op: docPut, id: "d", ifVersion: 6, value: "c"}, docOutput{found: true, version: 6}),
			},
		},
		{
			name: "a delete if v6 that wins, then v6 given again",
			bad: []porcupine.Operation{
				op(0, 60, 70, docInput{op: docDelete, id: "d", ifVersion: 6}, docOutput{}),
				op(1, 80, 90, docInput{op: docPut, id: "d", value: "c"}, docOutput{found: true, version: 6}),
			},
			allowed: []porcupine.Operation{
				op(0, 60, 70, docInput{op: docDelete, id: "d", ifVersion: 6}, docOutput{}),
				op(1, 80, 90, docInput{op: docPut, id: "d", value: "c"}, docOutput{found: true, version: 7}),
			},
		},
		{
			name: "a delete if v6 that wins, then a version below it given",
			bad: []porcupine.Operation{
				op(0, 60, 70, docInput{op: docDelete, id: "d", ifVersion: 6}, docOutput{}),
				op(1, 80, 90, docInput{op: docPut, id: "d", value: "c"}, docOutput{found: true, version: 3}),
			},
		},
		{
			name: "a put if v6 of unknown outcome, a delete if v7 that wins, then v6 given",
			bad: []porcupine.Operation{
				op(3, 60, never, docInput{op: docPut, id: "d", ifVersion: 6, value: "c"}, docOutput{unknown: true}),
				op(0, 80, 90, docInput{op: docDelete, id: "d", ifVersion: 7}, docOutput{}),
				op(1, 100, 110, docInput{op: docPut, id: "d", value: "e"}, docOutput{found: true, version: 6}),
			},
			allowed: []porcupine.Operation{
				op(3, 60, never, docInput{op: docPut, id: "d", ifVersion: 6, value: "c"}, docOutput{unknown: true}),
				op(0, 80, 90, docInput{op: docDelete, id: "d", ifVersion: 7}, docOutput{}),
				op(1, 100, 110, docInput{op: docPut, id: "d", value: "e"}, docOutput{found: true, version: 8}),
			},
		},
	}
	for _, c := range cases {
		if porcupine.CheckOperations(docModel, append(prefix(), c.bad...)) {
			t.Errorf("%s: accepted", c.name)
		}
		if c.allowed != nil && !porcupine.CheckOperations(docModel, append(prefix(), c.allowed...)) {
			t.Errorf("%s: its allowed variant was rejected", c.name)
		}
	}
}
