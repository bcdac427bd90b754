package qdrant

import (
	"errors"
	"reflect"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/vectorstore/internal/vecutil"
	"github.com/abi-engine/engine/ports"
)

// The ids must be RFC 9562 version 5 UUIDs, the same any other client
// (Python's uuid.uuid5(uuid.NAMESPACE_URL, id)) would compute, so data
// written by one engine version is found by the next.
func TestPointIDIsUUIDv5(t *testing.T) {
	for id, want := range map[string]string{
		"a":               "e1407479-3136-56c0-9908-bb02fb0339e2",
		"p0001":           "eee8bcb3-7b2d-50e6-ac42-227fc216da7d",
		"naïve café/../x": "d4e0ec58-c18c-5412-b815-5c701c555de5",
	} {
		if got := pointID(id).GetUuid(); got != want {
			t.Errorf("pointID(%q) = %s, want %s", id, got, want)
		}
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	in := map[string]any{"n": 42, "r": 0.5, "s": "x", "b": true, "z": nil,
		"l": []any{1, "a"}, "m": map[string]any{"k": 2.5}}
	p, err := toPayload("id-1", in)
	if err != nil {
		t.Fatalf("toPayload: %v", err)
	}
	if p["n"].GetIntegerValue() != 42 || p["r"].GetDoubleValue() != 0.5 {
		t.Fatalf("whole numbers go as integers, others as doubles: n=%v r=%v", p["n"], p["r"])
	}
	v := fromPoint(p, nil)
	if v.ID != "id-1" {
		t.Fatalf("id %q, want id-1", v.ID)
	}
	want := map[string]any{"n": 42.0, "r": 0.5, "s": "x", "b": true, "z": nil,
		"l": []any{1.0, "a"}, "m": map[string]any{"k": 2.5}}
	if !reflect.DeepEqual(v.Payload, want) {
		t.Fatalf("payload %#v, want %#v", v.Payload, want)
	}
	if _, err := toPayload("x", map[string]any{idKey: "y"}); err == nil {
		t.Fatalf("a payload using %q was accepted", idKey)
	}
}

// Qdrant cannot match a whole list or object, so such a filter is the
// caller's invalid argument, as docs/protocol.md tells, and not a search
// that quietly matches something else.
func TestAFilterOnAListOrAnObjectIsRefused(t *testing.T) {
	for name, filter := range map[string]map[string]any{
		"a list":    {"tags": []any{"a", "b"}},
		"an object": {"meta": map[string]any{"lang": "fr"}},
	} {
		f, err := vecutil.NewFilter(filter)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := filterOf(f); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Errorf("filter on %s: err %v, want ErrInvalidArgument", name, err)
		}
	}
	f, err := vecutil.NewFilter(map[string]any{"s": "x", "n": 2.0, "b": true, "z": nil})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := filterOf(f); err != nil {
		t.Errorf("filter on a string, a number, a boolean and null: %v", err)
	}
}
