package memory_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/ports"
)

// A store opened without settings holds at most 64 MiB: a caller writing
// value after value is refused with ports.ErrStorageFull, which the API
// answers 507, once the store is full, and what was stored stays. Before,
// the store held whatever callers sent, until the engine, holding the
// lease, ran out of memory.
func TestAKeyValueStoreWithoutSettingsRefusesWritesPast64MiB(t *testing.T) {
	s, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	value := make([]byte, 1<<20)
	n := 0
	for ; n < 80; n++ {
		if err = s.Set(t.Context(), fmt.Sprintf("k%02d", n), value, 0); err != nil {
			break
		}
	}
	if !errors.Is(err, ports.ErrStorageFull) || n != 63 {
		t.Fatalf("set %d of 1 MiB values into a store without settings: %v, want ports.ErrStorageFull at the 64th", n, err)
	}
	for i := range n {
		if _, err := s.Get(t.Context(), fmt.Sprintf("k%02d", i)); err != nil {
			t.Fatalf("value %d, stored before the store was full: %v", i, err)
		}
	}
}

// cost is what one entry of key and value counts against max_bytes.
func cost(key string, value []byte) int64 {
	return int64(len(key) + len(value) + memory.EntryOverhead)
}

func open(t *testing.T, maxBytes int64) *memory.Store {
	t.Helper()
	s, err := memory.Open(t.Context(), memory.Config{MaxBytes: maxBytes})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A full store refuses a set or a set_if_absent that needs room, as
// storage full, naming max_bytes; a write that frees as much as it takes
// (a value replaced by one as large) and one made once a delete has made
// room are stored. A store never drops a key to make room, as the cache
// does.
func TestAFullKeyValueStoreRefusesWhatNeedsRoomAndKeepsWhatItHolds(t *testing.T) {
	value := []byte("0123456789")
	s := open(t, 3*cost("k1", value))
	for _, k := range []string{"k1", "k2", "k3"} {
		if err := s.Set(t.Context(), k, value, 0); err != nil {
			t.Fatalf("Set(%s) into room for three: %v", k, err)
		}
	}
	err := s.Set(t.Context(), "k4", value, 0)
	if !errors.Is(err, ports.ErrStorageFull) || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("a fourth Set into room for three: %v, want ErrStorageFull naming max_bytes", err)
	}
	if ok, err := s.SetIfAbsent(t.Context(), "k4", value, 0); ok || !errors.Is(err, ports.ErrStorageFull) {
		t.Fatalf("a fourth SetIfAbsent into room for three: %v, %v; want false, ErrStorageFull", ok, err)
	}
	if err := s.Set(t.Context(), "k1", []byte("9876543210"), 0); err != nil {
		t.Fatalf("replacing a value by one as large in a full store: %v", err)
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		if ok, err := s.Exists(t.Context(), k); !ok || err != nil {
			t.Fatalf("Exists(%s) in the full store: %v, %v", k, ok, err)
		}
	}
	if ok, err := s.Delete(t.Context(), "k2"); !ok || err != nil {
		t.Fatalf("Delete(k2): %v, %v", ok, err)
	}
	if err := s.Set(t.Context(), "k4", value, 0); err != nil {
		t.Fatalf("Set once a delete made room: %v", err)
	}
	if ok, err := s.DeleteIfValue(t.Context(), "k3", value); !ok || err != nil {
		t.Fatalf("DeleteIfValue(k3): %v, %v", ok, err)
	}
	if ok, err := s.SetIfAbsent(t.Context(), "k5", value, 0); !ok || err != nil {
		t.Fatalf("SetIfAbsent once a delete made room: %v, %v", ok, err)
	}
}

// An entry larger than the whole store is refused as too large, 413, not
// as storage full: no room made would let it in.
func TestAnEntryLargerThanTheStoreIsRefusedAsTooLarge(t *testing.T) {
	s := open(t, 1024)
	big := make([]byte, 1024)
	if err := s.Set(t.Context(), "k", big, 0); !errors.Is(err, ports.ErrTooLarge) || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("Set of %d bytes into a store of 1024: %v, want ErrTooLarge naming max_bytes", len(big), err)
	}
	if ok, err := s.SetIfAbsent(t.Context(), "k", big, 0); ok || !errors.Is(err, ports.ErrTooLarge) {
		t.Fatalf("SetIfAbsent of %d bytes into a store of 1024: %v, %v; want false, ErrTooLarge", len(big), ok, err)
	}
	if err := s.Set(t.Context(), "k", make([]byte, 1024-1-memory.EntryOverhead), 0); err != nil {
		t.Fatalf("Set of an entry of exactly max_bytes: %v", err)
	}
}

// Expired entries give their room back: a full store whose entries have
// expired takes new ones, whether or not a read or the sweep met the
// expired ones first, and the sweep gives their room back too.
func TestExpiredEntriesGiveTheirRoomBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		value := []byte("0123456789")
		s := open(t, 2*cost("k1", value))
		for _, k := range []string{"k1", "k2"} {
			if err := s.Set(t.Context(), k, value, time.Second); err != nil {
				t.Fatalf("Set(%s): %v", k, err)
			}
		}
		if err := s.Set(t.Context(), "k3", value, 0); !errors.Is(err, ports.ErrStorageFull) {
			t.Fatalf("Set into a store full of live entries: %v, want ErrStorageFull", err)
		}
		time.Sleep(time.Second)
		if err := s.Set(t.Context(), "k3", value, 0); err != nil {
			t.Fatalf("Set once the entries that filled the store expired: %v", err)
		}
		if err := s.Set(t.Context(), "k4", value, time.Second); err != nil {
			t.Fatalf("Set of a second entry once the others expired: %v", err)
		}
		time.Sleep(time.Second)
		if n, err := s.DeleteExpired(t.Context()); n != 1 || err != nil {
			t.Fatalf("DeleteExpired = %d, %v; want 1", n, err)
		}
		if err := s.Set(t.Context(), "k5", value, 0); err != nil {
			t.Fatalf("Set once the sweep removed an expired entry: %v", err)
		}
	})
}

// A full store drops expired keys, the soonest expired first, as each
// write needs them: a write a millisecond after another dropped one is
// stored over a key expired since, and no live key is dropped. Before, a
// full store walked every key for expired ones, under its lock, at most
// once a second: a write within a second of a walk was refused as storage
// full though an expired key would have made room, and a caller keeping
// the store full made it stop every call for the walk each second, a sixth
// of a second at the default bound.
func TestAFullStoreDropsTheExpiredKeysEachWriteNeeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		value := []byte("0123456789")
		s := open(t, 4*cost("k1", value))
		for _, k := range []string{"k1", "k2", "k3"} {
			if err := s.Set(t.Context(), k, value, time.Millisecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Microsecond) // k1 expires first, then k2, then k3
		}
		if err := s.Set(t.Context(), "kl", value, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		if err := s.Set(t.Context(), "k4", value, time.Millisecond); err != nil {
			t.Fatalf("Set once k1, k2 and k3 expired: %v", err)
		}
		time.Sleep(time.Millisecond)
		for _, k := range []string{"k5", "k6", "k7"} {
			if err := s.Set(t.Context(), k, value, 0); err != nil {
				t.Fatalf("Set(%s) a millisecond after a write made room, the store full of live and expired keys: %v", k, err)
			}
		}
		for _, k := range []string{"kl", "k5", "k6", "k7"} {
			if ok, err := s.Exists(t.Context(), k); !ok || err != nil {
				t.Fatalf("Exists(%s) = %v, %v; want the live key kept", k, ok, err)
			}
		}
		if err := s.Set(t.Context(), "k8", value, 0); !errors.Is(err, ports.ErrStorageFull) {
			t.Fatalf("Set into a store full of live keys: %v, want ErrStorageFull", err)
		}
	})
}

// A negative max_bytes is refused, naming the setting; 0 is the default.
func TestANegativeMaxBytesIsRefused(t *testing.T) {
	err := memory.Config{MaxBytes: -1}.Check("services.keyvalue.config")
	if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "services.keyvalue.config.max_bytes") {
		t.Fatalf("Check of max_bytes -1 = %v, want ErrInvalidArgument naming services.keyvalue.config.max_bytes", err)
	}
	if _, err := memory.Open(t.Context(), memory.Config{MaxBytes: -1}); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Open with max_bytes -1 = %v, want ErrInvalidArgument", err)
	}
	c := memory.Config{}
	if c.Default(""); c.MaxBytes != memory.DefaultMaxBytes {
		t.Fatalf("the default max_bytes is %d, want %d", c.MaxBytes, memory.DefaultMaxBytes)
	}
}
