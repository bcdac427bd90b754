package maxbytes

import (
	"errors"
	"strings"
	"testing"

	"github.com/abi-engine/engine/ports"
)

func TestABoundLeftOutIsTheDefaultAndANegativeOneIsRefused(t *testing.T) {
	if got := Default(0, 64); got != 64 {
		t.Errorf("Default(0, 64) = %d, want the default", got)
	}
	if got := Default(10, 64); got != 10 {
		t.Errorf("Default(10, 64) = %d, want the bound set", got)
	}
	if err := Check("services.cache.config", 0, 64); err != nil {
		t.Errorf("Check of 0: %v", err)
	}
	err := Check("services.cache.config", -1, 64)
	if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "services.cache.config.max_bytes is -1") {
		t.Errorf("Check of -1 = %v, want an invalid argument naming the key", err)
	}
}
