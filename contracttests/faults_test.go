package contracttests_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/keyvalue/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// faultEnv names the fault a child run of TestSuitesReportFaults plants.
const faultEnv = "CONTRACTTESTS_FAULT"

// faulty is a correct store with one planted fault.
type faulty struct {
	*memory.Store
	fault string
}

func (f faulty) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if f.fault == "SetKeepsTheTTLTooLong" && ttl > 0 {
		ttl *= 1000
	}
	return f.Store.Set(ctx, key, value, ttl)
}

func (f faulty) ListKeys(ctx context.Context, prefix string, limit int, cursor string) ([]string, string, error) {
	if f.fault == "ListKeysGivesNothing" {
		return nil, "", nil
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
				store := memory.New()
				return func(*testing.T) ports.KeyValue { return faulty{store, fault} }
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
				"ListKeys p/ by 1: 0 keys (none), want 1000 keys",
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
	} {
		t.Run(c.fault, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^TestSuitesReportFaults$/^faulty$/^("+c.cases+")$", "-test.v")
			cmd.Env = append(os.Environ(), faultEnv+"="+c.fault)
			out, err := cmd.CombinedOutput()
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
