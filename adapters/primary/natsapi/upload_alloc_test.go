package natsapi_test

import (
	"runtime"
	"testing"

	"github.com/abi-engine/engine/internal/natstest"
)

// An uploaded request is held in one buffer of the size its upload
// announced and reserved. Grown chunk by chunk, as it was, a 32 MiB upload
// took some 160 MiB of buffers, each a quarter larger than the last, and
// the last alone up to a quarter more than the bytes its caller's share
// was charged with.
func TestAnUploadIsHeldInOneBufferOfItsSize(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e := newEngine(t, url, newObjects(t), engineOptions{}, (&sizes{}).service())
	nc := natstest.Connect(t, url)
	body := bigValue(32 << 20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	upload(t, nc, body)
	runtime.ReadMemStats(&after)
	if e.overflow.Parked() != int64(len(body)) {
		t.Fatalf("the upload holds %d bytes, want %d", e.overflow.Parked(), len(body))
	}
	// The chunks pass through the broker, which runs in this process, and
	// reach the engine as messages, a copy each: some three times the body
	// in all, where the buffers grown chunk by chunk made it near eight.
	spent := after.TotalAlloc - before.TotalAlloc
	t.Logf("an upload of %d bytes allocated %d bytes in the process", len(body), spent)
	if most := uint64(5 * len(body)); spent > most {
		t.Fatalf("an upload of %d bytes allocated %d bytes in the process, want at most %d", len(body), spent, most)
	}
}
