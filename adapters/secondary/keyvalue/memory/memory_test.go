package memory_test

import (
	"errors"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func TestKeyValueContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
			store, err := memory.Open(t.Context(), memory.Config{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = store.Close() })
			return func(*testing.T) ports.KeyValue { return store }
		}), contracttests.KeyValueCapabilities{})
	})
}

// QuickGet answers what Get answers, except a value too large to copy and
// encode where a call arrives, which it leaves to Get.
func TestQuickGetLeavesLargeValuesToGet(t *testing.T) {
	s, err := memory.Open(t.Context(), memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	small, large := []byte("v"), make([]byte, 16<<10+1)
	if err := s.Set(t.Context(), "small", small, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(t.Context(), "large", large, 0); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.QuickGet(t.Context(), "small"); !ok || err != nil || string(v) != "v" {
		t.Fatalf("QuickGet(small) = %q, %v, %v; want v, true, nil", v, ok, err)
	}
	if _, ok, err := s.QuickGet(t.Context(), "missing"); !ok || !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("QuickGet(missing) = %v, %v; want true, ErrNotFound", ok, err)
	}
	if _, ok, _ := s.QuickGet(t.Context(), "large"); ok {
		t.Fatal("QuickGet answered a value over 16 KiB")
	}
}
