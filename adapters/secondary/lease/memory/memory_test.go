package memory_test

import (
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/lease/memory"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

func TestLeaseContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		contracttests.RunLease(t, contracttests.HarnessFunc[ports.Lease](func(t *testing.T) func(*testing.T) ports.Lease {
			store := memory.New()
			return func(*testing.T) ports.Lease { return store }
		}))
	})
}
