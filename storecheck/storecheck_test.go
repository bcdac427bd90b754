package storecheck_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

func TestTTLSecondsRefusesWhatWouldRoundToZeroOrPassTheMost(t *testing.T) {
	for _, c := range []struct {
		seconds float64
		want    time.Duration
		bad     string // what the error must say; "" when accepted
	}{
		{0, 0, ""},
		{0.001, time.Millisecond, ""},
		{1.5, 1500 * time.Millisecond, ""},
		{ports.MaxTTL.Seconds(), ports.MaxTTL, ""},
		{1e-10, 0, "round to zero"},
		{0.0009, 0, "round to zero"},
		{-1, 0, "0 or more"},
		{math.NaN(), 0, "0 or more"},
		{ports.MaxTTL.Seconds() + 1, 0, "more than the most"},
		{1e300, 0, "more than the most"},
		{math.Inf(1), 0, "more than the most"},
	} {
		got, err := storecheck.TTLSeconds("ttl_seconds", c.seconds)
		switch {
		case c.bad == "" && (err != nil || got != c.want):
			t.Errorf("TTLSeconds(%v) = %v, %v; want %v", c.seconds, got, err, c.want)
		case c.bad != "" && (!errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), c.bad) || !strings.Contains(err.Error(), "ttl_seconds")):
			t.Errorf("TTLSeconds(%v): err %v, want ErrInvalidArgument naming ttl_seconds and saying %q", c.seconds, err, c.bad)
		}
	}
}

func TestLimitRefusesMoreThanAPage(t *testing.T) {
	for limit, want := range map[int]int{-5: ports.DefaultPage, 0: ports.DefaultPage, 1: 1, ports.MaxPage: ports.MaxPage} {
		if got, err := storecheck.Limit("limit", limit); err != nil || got != want {
			t.Errorf("Limit(%d) = %d, %v; want %d", limit, got, err, want)
		}
	}
	for _, limit := range []int{ports.MaxPage + 1, math.MaxInt} {
		if _, err := storecheck.Limit("limit", limit); !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "1000") {
			t.Errorf("Limit(%d): err %v, want ErrInvalidArgument naming the most", limit, err)
		}
	}
}

func TestJSONNamesThePathOfWhatItRefuses(t *testing.T) {
	deep := map[string]any{}
	for range ports.MaxDepth {
		deep = map[string]any{"a": deep}
	}
	for _, c := range []struct {
		v    any
		want string // "" when accepted
	}{
		{map[string]any{"s": "plain", "l": []any{1.0, "x", nil, true}}, ""},
		{map[string]any{"o": map[string]any{"l": []any{"ok", "a\x00"}}}, `at "o.l[1]": a string holds NUL`},
		{map[string]any{"o": map[string]any{"k\x00": 1.0}}, `a field name holds NUL`},
		{"\x00", `d: a string holds NUL`},
		{deep, "nests more than 100 levels deep"},
	} {
		err := storecheck.JSON("d", c.v)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("JSON(%v): %v, want no error", c.v, err)
		case c.want != "" && (!errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("JSON: err %v, want ErrInvalidArgument saying %q", err, c.want)
		}
	}
}
