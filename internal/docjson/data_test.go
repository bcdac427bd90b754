package docjson

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// longWay is what Data did for all data before it copied data of plain
// JSON values in one walk: marshal, check, read back, check, zero, marshal.
func longWay(id string, data map[string]any) ([]byte, map[string]any, error) {
	if data == nil {
		data = map[string]any{}
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, nil, fmt.Errorf("document %q is not JSON: %w: %w", id, ports.ErrInvalidArgument, err)
	}
	if err := storecheck.Marshaled(fmt.Sprintf("document %q data", id), raw); err != nil {
		return nil, nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("document %q is not JSON: %w: %w", id, ports.ErrInvalidArgument, err)
	}
	if err := storecheck.JSON(fmt.Sprintf("document %q data", id), m); err != nil {
		return nil, nil, err
	}
	zeroIn(m)
	raw, err = json.Marshal(m)
	if err != nil {
		return nil, nil, fmt.Errorf("document %q is not JSON: %w: %w", id, ports.ErrInvalidArgument, err)
	}
	return raw, m, nil
}

// builder makes a Go value from fuzz bytes: plain JSON values, and the
// shapes Data must refuse or take the long way for (-0, NaN, text outside
// UTF-8 or with NUL, nil maps and slices, Go types no JSON reads back as,
// nesting past ports.MaxDepth).
type builder struct{ b []byte }

func (g *builder) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

func (g *builder) text() string {
	n := min(int(g.byte()%16), len(g.b))
	s := string(g.b[:n])
	g.b = g.b[n:]
	return s
}

func (g *builder) object(depth int) map[string]any {
	m := map[string]any{}
	for n := g.byte() % 5; n > 0 && len(g.b) > 0; n-- {
		m[g.text()] = g.value(depth + 1)
	}
	return m
}

func (g *builder) value(depth int) any {
	if depth > 8 {
		return "deep"
	}
	switch g.byte() % 16 {
	case 0:
		return nil
	case 1:
		return g.byte()%2 == 0
	case 2:
		var f [8]byte
		for i := range f {
			f[i] = g.byte()
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(f[:]))
	case 3:
		return []float64{0, math.Copysign(0, -1), math.NaN(), math.Inf(-1)}[g.byte()%4]
	case 4, 5:
		return g.text()
	case 6:
		return g.object(depth)
	case 7:
		s := []any{}
		for n := g.byte() % 5; n > 0 && len(g.b) > 0; n-- {
			s = append(s, g.value(depth+1))
		}
		return s
	case 8:
		return map[string]any(nil)
	case 9:
		return []any(nil)
	case 10:
		return int(g.byte()) - 128
	case 11:
		return json.Number(g.text())
	case 12:
		return []string{g.text()}
	case 13:
		return map[string]string{g.text(): g.text()}
	case 14:
		// A chain around ports.MaxDepth, of maps or slices, ending in
		// whatever comes next.
		n := ports.MaxDepth - 3 + int(g.byte()%6)
		var v any = g.value(depth + 1)
		for i := range n {
			if (g.byte()+byte(i))%2 == 0 {
				v = map[string]any{"k": v}
			} else {
				v = []any{v}
			}
		}
		return v
	default:
		return json.RawMessage(g.text())
	}
}

// Data gives for any data what marshalling it, reading it back, checking
// and zeroing it gave: the same JSON, the same values, the same refusal;
// and it leaves the caller's data as it was.
func FuzzData(f *testing.F) {
	for _, s := range []string{
		"", "\x06\x02\x01a\x04\x03ab", "\x06\x01\x01a\x03\x01", "\x06\x01\x01a\x04\x02\xff\xfe",
		"\x06\x01\x01a\x04\x01\x00", "\x06\x01\x02\x00a\x00", "\x06\x01\x01a\x0e\x05\x00",
		"\x06\x01\x01a\x0e\x02\x00", "\x06\x01\x01a\x08", "\x06\x01\x01a\x0a\x05", "\x06\x01\x01a\x0f\x03\\ud8",
		"\x06\x01\x01a\x04\x06\\ufffd", "\x06\x01\x01a\x04\x03\xef\xbf\xbd", "\x06\x01\x01a\x07\x02\x03\x01\x03\x02",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		g := &builder{b: []byte(in)}
		var data map[string]any
		if g.byte()%8 != 0 {
			data = g.object(0)
		}
		before := fmt.Sprintf("%#v", data)
		wantRaw, wantM, wantErr := longWay("d", data)
		raw, m, err := Data("d", data)
		if after := fmt.Sprintf("%#v", data); after != before {
			t.Fatalf("Data changed the caller's data from %s to %s", before, after)
		}
		// Data of more than one fault names the first its walk meets, and
		// maps are walked in no fixed order: two runs of the long way
		// itself may name two faults. Both refuse alike, for the same cause.
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() &&
			(errors.Is(err, ports.ErrInvalidArgument) != errors.Is(wantErr, ports.ErrInvalidArgument) ||
				!strings.HasPrefix(err.Error(), `document "d" `)) {
			t.Fatalf("Data(%s): error %v, want %v", before, err, wantErr)
		}
		if string(raw) != string(wantRaw) {
			t.Fatalf("Data(%s) = %s, want %s", before, raw, wantRaw)
		}
		if !reflect.DeepEqual(m, wantM) {
			t.Fatalf("Data(%s) gave %#v, want %#v", before, m, wantM)
		}
		if err == nil {
			if _, ok := m["\x00mark"]; ok {
				t.Fatal("a field of NUL survived")
			}
			m["\x00mark"] = true // the data given back is the caller's to change
			if after := fmt.Sprintf("%#v", data); after != before {
				t.Fatalf("the data Data gave back is the caller's: changing it changed %s to %s", before, after)
			}
		}
	})
}
