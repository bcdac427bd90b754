package app_test

import (
	"testing"
	"time"

	httpapi "github.com/abi-engine/engine/adapters/primary/http"
	"github.com/abi-engine/engine/adapters/primary/natsapi"
)

// The HTTP API moves objects through the engine's transfers, a chunk a
// call, and lets a client send or take them as slowly as
// DefaultMinTransferRate. At that rate one chunk must still fill or drain
// with a quarter of the transfer's idle time to spare, or the engine
// closes a transfer the API still lets run.
func TestAChunkAtTheSlowestHTTPRateKeepsItsTransferAlive(t *testing.T) {
	perChunk := time.Duration(natsapi.DefaultTransferChunkSize) * time.Second / httpapi.DefaultMinTransferRate
	if limit := natsapi.DefaultTransferIdle * 3 / 4; perChunk > limit {
		t.Fatalf("a %d-byte chunk at %d bytes/s takes %v, more than %v of the transfer's idle time of %v",
			natsapi.DefaultTransferChunkSize, httpapi.DefaultMinTransferRate, perChunk, limit, natsapi.DefaultTransferIdle)
	}
}
