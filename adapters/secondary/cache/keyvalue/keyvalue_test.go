package keyvalue_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/cache/keyvalue"
	kvmemory "github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func openKeyValue(t *testing.T) *kvmemory.Store {
	t.Helper()
	kv, err := kvmemory.Open(t.Context(), kvmemory.Config{})
	if err != nil {
		t.Fatalf("open the keyvalue store: %v", err)
	}
	t.Cleanup(func() { kv.Close() })
	return kv
}

func openTier(t *testing.T, c keyvalue.Config, kv ports.KeyValue) *keyvalue.Store {
	t.Helper()
	tier, err := keyvalue.Open(t.Context(), c, kv)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { tier.Close() })
	return tier
}

func TestCacheContract(t *testing.T) {
	t.Run("keyvalue", func(t *testing.T) {
		contracttests.RunCache(t, contracttests.HarnessFunc[ports.Cache](func(t *testing.T) func(*testing.T) ports.Cache {
			kv := openKeyValue(t)
			// Each handle is a tier of its own over the one store, as two
			// engines sharing a keyvalue service would be.
			return func(t *testing.T) ports.Cache { return openTier(t, keyvalue.Config{}, kv) }
		}))
	})
}

// The tier keeps to its prefix, so it never touches the store's other keys.
func TestTierStaysUnderItsPrefix(t *testing.T) {
	kv := openKeyValue(t)
	if err := kv.Set(t.Context(), "other", []byte("theirs"), 0); err != nil {
		t.Fatalf("Set: %v", err)
	}
	tier := openTier(t, keyvalue.Config{Prefix: "c/"}, kv)
	for _, key := range []string{"other", "k", strings.Repeat("x", 1024)} {
		if err := tier.Set(t.Context(), key, []byte("cached"), 0); err != nil {
			t.Fatalf("tier Set %.20q: %v", key, err)
		}
	}
	keys, _, err := kv.ListKeys(t.Context(), "", 1000, "")
	if err != nil {
		t.Fatalf("ListKeys: %v", err)
	}
	for _, k := range keys {
		if k != "other" && !strings.HasPrefix(k, "c/") {
			t.Fatalf("the tier wrote %q outside its prefix c/", k)
		}
	}
	if len(keys) != 4 || !slices.Contains(keys, "c/k:k") {
		t.Fatalf("store keys %q, want other and three under c/", keys)
	}
	if v, err := kv.Get(t.Context(), "other"); err != nil || string(v) != "theirs" {
		t.Fatalf("the store's own key reads %q, %v", v, err)
	}
}

type where string

func (w where) LocalStorage() string { return string(w) }

func TestLocalStorageFollowsTheService(t *testing.T) {
	for _, c := range []struct {
		service ports.StorageConfig
		want    string
	}{
		{kvmemory.Config{}, "keyvalue tier on the keyvalue service: this process"},
		{where("SQLite at .engine/kv.sqlite"), "keyvalue tier on the keyvalue service: SQLite at .engine/kv.sqlite"},
		{where(""), ""},
	} {
		if got := (keyvalue.Config{Service: c.service}).LocalStorage(); got != c.want {
			t.Errorf("over %#v: LocalStorage %q, want %q", c.service, got, c.want)
		}
	}
	if got := (keyvalue.Config{}).LocalStorage(); got == "" {
		t.Errorf("without the service's configuration, LocalStorage passes as shared")
	}
}

// A key too long to keep its name after the prefix is stored under its
// hash: a prefix that leaves no room for the hash is refused at open, and
// the longest one taken still stores the longest key.
func TestAPrefixLeavesRoomForTheHash(t *testing.T) {
	if _, err := keyvalue.Open(t.Context(), keyvalue.Config{Prefix: strings.Repeat("p", 1000)}, openKeyValue(t)); !errors.Is(err, ports.ErrInvalidArgument) {
		t.Fatalf("Open with a prefix of 1000 bytes: err %v, want ErrInvalidArgument", err)
	}
	tier := openTier(t, keyvalue.Config{Prefix: strings.Repeat("p", 1024-2-64)}, openKeyValue(t))
	if err := tier.Set(t.Context(), strings.Repeat("k", 1024), []byte("v"), 0); err != nil {
		t.Fatalf("Set of the longest key under the longest prefix: %v", err)
	}
}
