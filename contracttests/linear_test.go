package contracttests

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// The linearizability cases are only as strict as their models: each
// history here is one a store that broke a promise would give, and must be
// rejected; its variant that keeps the promise must be accepted.
func TestTheLinearizabilityModelsRejectWhatAStoreMustNotDo(t *testing.T) {
	op := func(client int, call, ret int64, in, out any) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
	}
	put := func(value string, cond bool, at uint64) docLinearInput {
		return docLinearInput{op: "put", value: value, cond: cond, ifVersion: at}
	}
	get := docLinearInput{op: "get"}
	cases := []struct {
		name         string
		model        porcupine.Model
		bad, allowed []porcupine.Operation
	}{
		{
			name:  "a put that kept the version it replaced",
			model: docLinearModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, put("a", true, 0), docLinearOutput{found: true, version: 1}),
				op(1, 20, 30, put("b", false, 0), docLinearOutput{found: true, version: 1}),
				op(0, 40, 50, put("c", true, 1), docLinearOutput{found: true, version: 2}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, put("a", true, 0), docLinearOutput{found: true, version: 1}),
				op(1, 20, 30, put("b", false, 0), docLinearOutput{found: true, version: 2}),
				op(0, 40, 50, put("c", true, 1), docLinearOutput{conflict: true}),
			},
		},
		{
			// A writer still holding version 1 of the deleted document
			// would overwrite the new one: a version is never given twice.
			name:  "a version given again after a delete",
			model: docLinearModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, put("a", true, 0), docLinearOutput{found: true, version: 1}),
				op(0, 20, 30, docLinearInput{op: "delete", cond: true, ifVersion: 1}, docLinearOutput{}),
				op(1, 40, 50, put("b", true, 0), docLinearOutput{found: true, version: 1}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, put("a", true, 0), docLinearOutput{found: true, version: 1}),
				op(0, 20, 30, docLinearInput{op: "delete", cond: true, ifVersion: 1}, docLinearOutput{}),
				op(1, 40, 50, put("b", true, 0), docLinearOutput{found: true, version: 2}),
				op(1, 60, 70, get, docLinearOutput{found: true, version: 2, value: "b"}),
			},
		},
		{
			name:  "a conditional delete that found nothing reported as a conflict",
			model: docLinearModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, docLinearInput{op: "delete", cond: true, ifVersion: 1}, docLinearOutput{conflict: true}),
				op(1, 20, 30, get, docLinearOutput{notFound: true}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, docLinearInput{op: "delete", cond: true, ifVersion: 1}, docLinearOutput{notFound: true}),
				op(1, 20, 30, get, docLinearOutput{notFound: true}),
			},
		},
		{
			name:  "a read of a value a finished set replaced",
			model: kvLinearModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, kvLinearInput{op: "set", value: "a"}, kvLinearOutput{}),
				op(0, 20, 30, kvLinearInput{op: "set", value: "b"}, kvLinearOutput{}),
				op(1, 40, 50, kvLinearInput{op: "get"}, kvLinearOutput{found: true, value: "a"}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, kvLinearInput{op: "set", value: "a"}, kvLinearOutput{}),
				op(0, 20, 45, kvLinearInput{op: "set", value: "b"}, kvLinearOutput{}),
				op(1, 40, 50, kvLinearInput{op: "get"}, kvLinearOutput{found: true, value: "a"}),
			},
		},
		{
			name:  "two set_if_absent both stored",
			model: kvLinearModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, kvLinearInput{op: "set_if_absent", value: "a"}, kvLinearOutput{ok: true}),
				op(1, 0, 10, kvLinearInput{op: "set_if_absent", value: "b"}, kvLinearOutput{ok: true}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, kvLinearInput{op: "set_if_absent", value: "a"}, kvLinearOutput{ok: true}),
				op(1, 0, 10, kvLinearInput{op: "set_if_absent", value: "b"}, kvLinearOutput{}),
			},
		},
		{
			name:  "a delete_if_value of a value the key no longer holds",
			model: kvLinearModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, kvLinearInput{op: "set", value: "a"}, kvLinearOutput{}),
				op(0, 20, 30, kvLinearInput{op: "set", value: "b"}, kvLinearOutput{}),
				op(1, 40, 50, kvLinearInput{op: "delete_if_value", value: "a"}, kvLinearOutput{ok: true}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, kvLinearInput{op: "set", value: "a"}, kvLinearOutput{}),
				op(0, 20, 30, kvLinearInput{op: "set", value: "b"}, kvLinearOutput{}),
				op(1, 40, 50, kvLinearInput{op: "delete_if_value", value: "b"}, kvLinearOutput{ok: true}),
				op(1, 60, 70, kvLinearInput{op: "exists"}, kvLinearOutput{}),
			},
		},
		{
			name:  "a get that paired one version's ETag with another's content",
			model: objLinearModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, objLinearInput{op: "put", content: "a"}, objLinearOutput{found: true, etag: "ea", size: 1}),
				op(0, 20, 30, objLinearInput{op: "put", content: "b"}, objLinearOutput{found: true, etag: "eb", size: 1}),
				op(1, 25, 40, objLinearInput{op: "get"}, objLinearOutput{found: true, etag: "ea", content: "b", size: 1}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, objLinearInput{op: "put", content: "a"}, objLinearOutput{found: true, etag: "ea", size: 1}),
				op(0, 20, 30, objLinearInput{op: "put", content: "b"}, objLinearOutput{found: true, etag: "eb", size: 1}),
				op(1, 25, 40, objLinearInput{op: "get"}, objLinearOutput{found: true, etag: "ea", content: "a", size: 1}),
			},
		},
		{
			name:  "two deletes of one object both succeeded",
			model: objLinearModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, objLinearInput{op: "put", content: "a"}, objLinearOutput{found: true, etag: "ea", size: 1}),
				op(0, 20, 30, objLinearInput{op: "delete"}, objLinearOutput{}),
				op(1, 20, 30, objLinearInput{op: "delete"}, objLinearOutput{}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, objLinearInput{op: "put", content: "a"}, objLinearOutput{found: true, etag: "ea", size: 1}),
				op(0, 20, 30, objLinearInput{op: "delete"}, objLinearOutput{}),
				op(1, 20, 30, objLinearInput{op: "delete"}, objLinearOutput{notFound: true}),
			},
		},
		{
			name:  "a put at an ETag the object no longer had",
			model: objLinearModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, objLinearInput{op: "put", content: "a"}, objLinearOutput{found: true, etag: "ea", size: 1}),
				op(1, 20, 30, objLinearInput{op: "put", content: "b"}, objLinearOutput{found: true, etag: "eb", size: 1}),
				op(0, 40, 50, objLinearInput{op: "put", content: "c", ifMatch: "ea"}, objLinearOutput{found: true, etag: "ec", size: 1}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, objLinearInput{op: "put", content: "a"}, objLinearOutput{found: true, etag: "ea", size: 1}),
				op(1, 20, 30, objLinearInput{op: "put", content: "b"}, objLinearOutput{found: true, etag: "eb", size: 1}),
				op(0, 40, 50, objLinearInput{op: "put", content: "c", ifMatch: "ea"}, objLinearOutput{conflict: true}),
			},
		},
		{
			name:  "a stat that gave another version's size",
			model: objLinearModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, objLinearInput{op: "put", content: "a"}, objLinearOutput{found: true, etag: "ea", size: 1}),
				op(0, 20, 30, objLinearInput{op: "put", content: "bb"}, objLinearOutput{found: true, etag: "eb", size: 2}),
				op(1, 40, 50, objLinearInput{op: "stat"}, objLinearOutput{found: true, etag: "eb", size: 1}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, objLinearInput{op: "put", content: "a"}, objLinearOutput{found: true, etag: "ea", size: 1}),
				op(0, 20, 30, objLinearInput{op: "put", content: "bb"}, objLinearOutput{found: true, etag: "eb", size: 2}),
				op(1, 40, 50, objLinearInput{op: "stat"}, objLinearOutput{found: true, etag: "eb", size: 2}),
			},
		},
		{
			name:  "a put of other content that kept the ETag",
			model: objLinearModel,
			bad: []porcupine.Operation{
				op(0, 0, 10, objLinearInput{op: "put", content: "a"}, objLinearOutput{found: true, etag: "e", size: 1}),
				op(0, 20, 30, objLinearInput{op: "put", content: "b"}, objLinearOutput{found: true, etag: "e", size: 1}),
			},
			allowed: []porcupine.Operation{
				op(0, 0, 10, objLinearInput{op: "put", content: "a"}, objLinearOutput{found: true, etag: "e", size: 1}),
				op(0, 20, 30, objLinearInput{op: "put", content: "a"}, objLinearOutput{found: true, etag: "e", size: 1}),
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
