package natsapi_test

import (
	"context"
	"encoding/base64"
	"testing"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	cachememory "github.com/abi-engine/engine/adapters/secondary/cache/memory"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/ports"
)

func newMemoryCache(tb testing.TB) ports.Cache {
	tb.Helper()
	store, err := cachememory.Open(context.Background(), cachememory.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = store.Close() })
	return store
}

func TestTheCacheWireFormat(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	newHost(t, url, natsapi.Options{}, natsapi.Cache(newMemoryCache(t)))
	checkWire(t, natstest.Connect(t, url), ports.ServiceCache, nil, []wireStep{
		{"set", `{"key":"k","value":"aGk=","ttl_seconds":3600}`, `{}`, ""},
		{"get", `{"key":"k"}`, `{"value":"aGk="}`, ""},
		{"get", `{"key":"nope"}`, ``, "404"},
		{"set_if_absent", `{"key":"k","value":"eA=="}`, `{"set":false}`, ""},
		{"set_if_absent", `{"key":"j","value":""}`, `{"set":true}`, ""},
		{"get", `{"key":"j"}`, `{"value":""}`, ""},
		{"exists", `{"key":"k"}`, `{"exists":true}`, ""},
		{"delete", `{"key":"k"}`, `{"deleted":true}`, ""},
		{"delete", `{"key":"k"}`, `{"deleted":false}`, ""},
		{"exists", `{"key":"k"}`, `{"exists":false}`, ""},
		{"set", `{"key":"k","value":"aGk=","ttl_seconds":-1}`, ``, "400"},
	})
}

// A set larger than the whole memory cache is a 413, and the entries it
// would have pushed out are still there.
func TestACacheSetLargerThanTheMemoryCacheIsA413(t *testing.T) {
	store, err := cachememory.Open(t.Context(), cachememory.Config{MaxBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	url := natstest.StartServer(t).ClientURL()
	newHost(t, url, natsapi.Options{}, natsapi.Cache(store))
	big := base64.StdEncoding.EncodeToString(make([]byte, 256))
	checkWire(t, natstest.Connect(t, url), ports.ServiceCache, nil, []wireStep{
		{"set", `{"key":"k","value":"aGk="}`, `{}`, ""},
		{"set", `{"key":"big","value":"` + big + `"}`, ``, "413"},
		{"set_if_absent", `{"key":"big","value":"` + big + `","ttl_seconds":60}`, ``, "413"},
		{"get", `{"key":"k"}`, `{"value":"aGk="}`, ""},
		{"exists", `{"key":"big"}`, `{"exists":false}`, ""},
	})
}

// FuzzCacheRequests runs every cache endpoint on any body, against a fresh
// cache.
func FuzzCacheRequests(f *testing.F) {
	fuzzService(f, "cache", func(t *testing.T) natsapi.Service {
		return natsapi.Cache(newMemoryCache(t))
	}, ports.ErrInvalidArgument, ports.ErrNotFound)
}
