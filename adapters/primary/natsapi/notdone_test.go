package natsapi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// A write its store did not do, and that changed nothing (ports.ErrNotDone),
// answers 503, which tells the caller to send it again and its client
// reads as unavailable; as a 500's, its text is the call and a log
// reference, never the store's, which the log keeps. Before, it answered
// 500, which says the write may or may not have happened.
func TestAWriteTheStoreDidNotDoAnswers503WithoutItsText(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	const secretPath = "/var/lib/abi/objects/.upload-17"
	logs := hostSayerLogging(t, url, func(context.Context, *natsapi.Call) ([]byte, error) {
		return nil, fmt.Errorf("put %q: the service refused each sending of %s: %w", "k", secretPath, ports.ErrNotDone)
	})

	_, err := ask(natstest.Connect(t, url), 5*time.Second)
	var re *wire.RemoteError
	if !errors.As(err, &re) || re.Code != wire.CodeUnavailable || !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("a write the store did not do answered %v, want a 503", err)
	}
	if strings.Contains(re.Message, secretPath) {
		t.Fatalf("the caller reads the store's text: %q", re.Message)
	}
	ref := logRef(re.Message)
	if !strings.Contains(re.Message, sayer) || !strings.Contains(re.Message, "send it again") || len(ref) != 12 {
		t.Fatalf("the message %q names neither the call, that it may be sent again, nor a log reference", re.Message)
	}
	requireLogged(t, logs, ref, secretPath)
}

// A call the engine stopped while it ran answers 500, interrupted, even
// when its store said it did nothing: the protocol keeps 503 for calls the
// engine never started or a store refused as a whole (ports.ErrNotDone
// alone).
func TestAStoresNotDoneIs503UnlessTheEngineStoppedTheCall(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{ports.ErrNotDone, wire.CodeUnavailable},
		{fmt.Errorf("put: %w", ports.ErrNotDone), wire.CodeUnavailable},
		{fmt.Errorf("%w: the engine stopped the call while it ran: %w", wire.ErrInterrupted, ports.ErrNotDone), wire.CodeInternal},
		{fmt.Errorf("%w: %w", ports.ErrStorageFull, ports.ErrNotDone), wire.CodeStorageFull},
	} {
		if got := wire.CodeOf(c.err); got != c.want {
			t.Errorf("CodeOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
