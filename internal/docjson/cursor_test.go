package docjson

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// A cursor is a caller's text: whatever it holds, DecodeCursor refuses it
// as invalid or yields a key that KeyOf could have made for the query it
// names, and that key's own cursor reads back as the same key. A cursor
// made for one query is refused by another.
func FuzzDecodeCursor(f *testing.F) {
	q := ports.Query{OrderBy: "n", Desc: true}
	for _, k := range []Key{
		KeyOf("a", nil, false),
		KeyOf("b", true, true),
		KeyOf("c", -2.5, true),
		KeyOf("d", "some text", true),
		KeyOf("e", []any{1.0}, true),
		KeyOf("f", map[string]any{"x": 1.0}, true),
		KeyOf(strings.Repeat("x", storecheck.MaxKey), math.MaxFloat64, true),
	} {
		f.Add(q.OrderBy, q.Desc, EncodeCursor(q, k))
	}
	f.Add("n", false, "e30")     // {}
	f.Add("", false, "bnVsbA")   // null
	f.Add("n", true, "!!notb64") // not base64
	f.Fuzz(func(t *testing.T, orderBy string, desc bool, text string) {
		q := ports.Query{OrderBy: orderBy, Desc: desc, Cursor: text}
		k, ok, err := DecodeCursor(q)
		if text == "" {
			if ok || err != nil {
				t.Fatalf("no cursor: ok %v, err %v; want neither", ok, err)
			}
			return
		}
		if err != nil {
			if ok || !errors.Is(err, ports.ErrInvalidArgument) {
				t.Fatalf("cursor %q refused with ok %v, err %v; want an invalid argument alone", text, ok, err)
			}
			return
		}
		if !ok {
			t.Fatalf("cursor %q: neither a key nor an error", text)
		}
		switch {
		case k.Rank < RankNull || k.Rank > RankComposite, math.IsNaN(k.Num), math.IsInf(k.Num, 0),
			storecheck.Key("id", k.ID) != nil, strings.IndexByte(k.Str, 0) >= 0,
			k.Rank != RankString && k.Rank != RankNull && k.Rank != RankNumber && k.Rank != RankBool && k.Str != "":
			t.Fatalf("cursor %q gave %+v, a key no document has", text, k)
		}
		again, ok, err := DecodeCursor(ports.Query{OrderBy: orderBy, Desc: desc, Cursor: EncodeCursor(q, k)})
		if err != nil || !ok || again != k {
			t.Fatalf("cursor %q gave %+v; its own cursor gave %+v, ok %v, err %v", text, k, again, ok, err)
		}
		other := ports.Query{OrderBy: orderBy + "x", Desc: desc, Cursor: text}
		if _, _, err := DecodeCursor(other); !errors.Is(err, ports.ErrInvalidArgument) {
			t.Fatalf("cursor %q of order %q taken for order %q: err %v", text, orderBy, other.OrderBy, err)
		}
	})
}
