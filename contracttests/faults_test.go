package contracttests_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	objmemory "github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	vecmemory "github.com/abi-engine/engine/adapters/secondary/vectorstore/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// faultEnv names the fault a child run of TestSuitesReportFaults plants.
const faultEnv = "CONTRACTTESTS_FAULT"

// runFault runs the tests that match run in a child process of this test
// binary, with fault planted, and returns the child's output. The child
// has a time limit of its own: a suite that hangs on a faulty store fails
// its run, and does not outlive the test that started it.
func runFault(t *testing.T, run, fault string) ([]byte, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", run, "-test.v", "-test.timeout", "3m")
	cmd.Env = append(os.Environ(), faultEnv+"="+fault)
	return cmd.CombinedOutput()
}

// faulty is a correct store with one planted fault.
type faulty struct {
	*memory.Store
	fault string
	// expiring holds the keys written with a TTL, for a fault on them.
	expiring *sync.Map
}

func (f faulty) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if f.fault == "SetKeepsTheTTLTooLong" && ttl > 0 {
		ttl *= 1000
	}
	if ttl > 0 {
		f.expiring.Store(key, true)
	}
	return f.Store.Set(ctx, key, value, f.seconds(ttl))
}

func (f faulty) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if _, expiring := f.expiring.Load(key); f.fault == "SetIfAbsentOverAnExpiredKeyChecksThenWrites" && expiring {
		// The expired value is found gone, then written over in a step of
		// its own, as a store that is not atomic on that path does.
		if ok, err := f.Exists(ctx, key); err != nil || ok {
			return false, err
		}
		time.Sleep(10 * time.Millisecond)
		return true, f.Store.Set(ctx, key, value, ttl)
	}
	return f.Store.SetIfAbsent(ctx, key, value, f.seconds(ttl))
}

// seconds keeps a valid TTL in whole seconds, as a store with a column of
// seconds would, when that is the fault.
func (f faulty) seconds(ttl time.Duration) time.Duration {
	if f.fault == "TTLsAreKeptInWholeSeconds" && ttl >= ports.MinTTL && ttl <= ports.MaxTTL {
		return ttl.Truncate(time.Second)
	}
	return ttl
}

func (f faulty) ListKeys(ctx context.Context, prefix string, limit int, cursor string) ([]string, string, error) {
	if f.fault == "ListKeysGivesNothing" {
		return nil, "", nil
	}
	if f.fault == "ListKeysLooksTheCursorUp" && storecheck.Prefix("cursor", cursor) == nil && cursor != "" {
		if ok, err := f.Exists(ctx, cursor); err == nil && !ok {
			cursor = ""
		}
	}
	return f.Store.ListKeys(ctx, prefix, limit, cursor)
}

// A suite meeting a broken adapter must fail the case that found it, name
// the method that broke the rule, and let every other case run: a panic
// would lose them all. The suite runs in a child process, since its
// failures are the expected outcome here.
func TestSuitesReportFaults(t *testing.T) {
	if fault := os.Getenv(faultEnv); fault != "" {
		t.Run("faulty", func(t *testing.T) {
			contracttests.RunKeyValue(t, contracttests.HarnessFunc[ports.KeyValue](func(t *testing.T) func(*testing.T) ports.KeyValue {
				store, expiring := memory.New(), &sync.Map{}
				return func(*testing.T) ports.KeyValue { return faulty{store, fault, expiring} }
			}), contracttests.KeyValueCapabilities{})
		})
		return
	}
	for _, c := range []struct {
		fault, cases string
		want, never  []string
	}{
		{
			fault: "ListKeysGivesNothing",
			cases: "ListKeysPagination|SetThenGet",
			want: []string{
				"--- FAIL: TestSuitesReportFaults/faulty/ListKeysPagination",
				"ListKeys p/ by 1: 0 keys (none), want 500 keys",
				"--- PASS: TestSuitesReportFaults/faulty/SetThenGet",
			},
		},
		{
			fault: "SetKeepsTheTTLTooLong",
			cases: "TTLExpiry",
			want: []string{
				"--- FAIL: TestSuitesReportFaults/faulty/TTLExpiry",
				`Set "ttl/list" with a TTL of 1s: ListKeys shows it and Get still returns "old" after the TTL passed; Set kept the TTL too long`,
			},
			never: []string{"ListKeys ignores expiry"},
		},
		{
			fault: "ListKeysLooksTheCursorUp",
			cases: "ListKeysAfterACursorNoLongerStored|ListKeysPagination",
			want: []string{
				"--- FAIL: TestSuitesReportFaults/faulty/ListKeysAfterACursorNoLongerStored",
				`ListKeys by 2 after cursor "b", whose key is not stored = ["a" "c"]`,
				"--- PASS: TestSuitesReportFaults/faulty/ListKeysPagination",
			},
		},
		{
			fault: "SetIfAbsentOverAnExpiredKeyChecksThenWrites",
			cases: "SetIfAbsentRaceOverAnExpiredKey|SetIfAbsentRace|TTLExpiry",
			want: []string{
				"--- FAIL: TestSuitesReportFaults/faulty/SetIfAbsentRaceOverAnExpiredKey",
				"won SetIfAbsent over an expired key, want exactly one",
				"--- PASS: TestSuitesReportFaults/faulty/SetIfAbsentRace ",
				"--- PASS: TestSuitesReportFaults/faulty/TTLExpiry",
			},
		},
		{
			fault: "TTLsAreKeptInWholeSeconds",
			cases: "TTLBelowASecondExpires|TTLExpiry",
			want: []string{
				"--- FAIL: TestSuitesReportFaults/faulty/TTLBelowASecondExpires",
				`Set "set" with a TTL of 500ms: Get still returns it after 10s; Set dropped a TTL below a second`,
				"--- PASS: TestSuitesReportFaults/faulty/TTLExpiry",
			},
		},
	} {
		t.Run(c.fault, func(t *testing.T) {
			t.Parallel()
			out, err := runFault(t, "^TestSuitesReportFaults$/^faulty$/^("+c.cases+")$", c.fault)
			if err == nil {
				t.Fatalf("the suite passed a store whose %s:\n%s", c.fault, out)
			}
			if strings.Contains(string(out), "panic:") {
				t.Fatalf("the suite panicked on a store whose %s:\n%s", c.fault, out)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the suite's output lacks %q:\n%s", w, out)
				}
			}
			for _, n := range c.never {
				if strings.Contains(string(out), n) {
					t.Errorf("the suite's output says %q, blaming the wrong method:\n%s", n, out)
				}
			}
		})
	}
}

// valuelessSearch is a correct vector store whose Search leaves out the
// values of the vectors it finds.
type valuelessSearch struct{ *vecmemory.Store }

func (v valuelessSearch) Search(ctx context.Context, collection string, query []float32, k int, filter map[string]any) ([]ports.ScoredVector, error) {
	found, err := v.Store.Search(ctx, collection, query, k, filter)
	for i := range found {
		found[i].Values = nil
	}
	return found, err
}

// A search result names a vector and carries it, values and payload, as
// the protocol's results do; a store whose Search drops the values would
// answer every caller an empty vector, so the suite must fail it.
func TestTheVectorSuiteFailsASearchThatLeavesOutTheValues(t *testing.T) {
	if os.Getenv(faultEnv) == "SearchLeavesOutTheValues" {
		t.Run("faulty", func(t *testing.T) {
			contracttests.RunVectorStore(t, contracttests.HarnessFunc[ports.VectorStore](func(t *testing.T) func(*testing.T) ports.VectorStore {
				store, err := vecmemory.Open(t.Context(), vecmemory.Config{})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return func(*testing.T) ports.VectorStore { return valuelessSearch{store} }
			}), contracttests.VectorStoreCapabilities{})
		})
		return
	}
	out, err := runFault(t, "^TestTheVectorSuiteFailsASearchThatLeavesOutTheValues$/^faulty$/^SearchDotMatchesBruteForce$", "SearchLeavesOutTheValues")
	if err == nil {
		t.Fatalf("the suite passed a store whose Search leaves out the values:\n%s", out)
	}
	if want := "Search leaves out the values"; !strings.Contains(string(out), want) {
		t.Fatalf("the suite's output lacks %q:\n%s", want, out)
	}
}

// cursorLookup is a correct object store whose List looks its cursor up
// and, not finding the object, lists from the start.
type cursorLookup struct{ *objmemory.Store }

func (c cursorLookup) List(ctx context.Context, prefix string, limit int, cursor string) ([]ports.ObjectInfo, string, error) {
	if cursor != "" && storecheck.Prefix("cursor", cursor) == nil {
		if _, err := c.Stat(ctx, cursor); errors.Is(err, ports.ErrNotFound) {
			cursor = ""
		}
	}
	return c.Store.List(ctx, prefix, limit, cursor)
}

// A page of objects continues after its cursor when the object the page
// before ended with has been deleted since; a store that looks the
// cursor up and lists from the start when it is gone would send a caller
// paging through round and round, so the suite must fail it.
func TestTheObjectSuiteFailsAListThatLooksItsCursorUp(t *testing.T) {
	if os.Getenv(faultEnv) == "ListLooksTheCursorUp" {
		t.Run("faulty", func(t *testing.T) {
			contracttests.RunObjectStorage(t, contracttests.HarnessFunc[ports.ObjectStorage](func(t *testing.T) func(*testing.T) ports.ObjectStorage {
				store, err := objmemory.Open(t.Context(), objmemory.Config{})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return func(*testing.T) ports.ObjectStorage { return cursorLookup{store} }
			}), contracttests.ObjectStorageCapabilities{ConditionalPut: true, PathLikeKeys: true, NestedKeys: true, Linearizable: true})
		})
		return
	}
	out, err := runFault(t, "^TestTheObjectSuiteFailsAListThatLooksItsCursorUp$/^faulty$/^(ListAfterACursorNoLongerStored|ListPagination)$", "ListLooksTheCursorUp")
	if err == nil {
		t.Fatalf("the suite passed a store whose List looks its cursor up:\n%s", out)
	}
	for _, want := range []string{
		"--- FAIL: TestTheObjectSuiteFailsAListThatLooksItsCursorUp/faulty/ListAfterACursorNoLongerStored",
		`whose object was deleted = ["a" "c"]`,
		"--- PASS: TestTheObjectSuiteFailsAListThatLooksItsCursorUp/faulty/ListPagination",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the suite's output lacks %q:\n%s", want, out)
		}
	}
}
