package natsapi_test

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
)

// One caller floods closes at its own download, whose read waits in a
// store that does not heed the cancel: every close is answered at once,
// the transfer closes once the store lets go, and another caller's upload
// goes through meanwhile. Before, each close waited for the session's
// lock, holding one of the slots the host keeps for calls it does not
// count; a flood took them all, the host stopped taking messages, and
// every caller's transfer calls stalled until the store returned.
func TestAFloodOfClosesAtAStuckTransferStallsNoOtherCallersTransfer(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	e, d := startStuckDownload(t, url)
	flooder, stuck := d.nc, d.opened

	// Far more closes than the host's 64 slots for calls it does not
	// count, all sent before the other caller's upload.
	const closes = 300
	var answered atomic.Int32
	all := make(chan struct{})
	inbox := nats.NewInbox()
	sub, err := flooder.Subscribe(inbox, func(*nats.Msg) {
		if answered.Add(1) == closes {
			close(all)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	for range closes {
		msg := nats.NewMsg(transferSubject(stuck.ID, wire.SessionClose))
		msg.Reply = inbox
		msg.Header.Set(wire.SessionHeader, stuck.ID)
		msg.Header.Set(wire.SessionSecretHeader, stuck.Secret)
		if err := flooder.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := flooder.Flush(); err != nil {
		t.Fatal(err)
	}

	bystander := natstest.Connect(t, url)
	up, err := openTransfer(t, bystander, wire.TransferOpen{Mode: wire.TransferPut, Key: "other"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(t, bystander, up, 0, "its bytes"); err != nil {
		t.Fatalf("another caller's write while closes flood a stuck transfer: %v", err)
	}
	body, _ := json.Marshal(wire.TransferCommit{Chunks: 1})
	if _, err := sessionCall(bystander, transferSubject(up.ID, wire.SessionCommit), up.Ref(), -1, body, nil); err != nil {
		t.Fatalf("another caller's commit while closes flood a stuck transfer: %v", err)
	}
	if _, err := sessionCall(bystander, transferSubject(up.ID, wire.SessionClose), up.Ref(), -1, nil, nil); err != nil {
		t.Fatalf("another caller's close of its upload: %v", err)
	}
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d of %d closes of the stuck transfer answered in 30 s", answered.Load(), closes)
	}
	if open := e.transfers.Open(); open != 1 {
		t.Fatalf("%d transfers open while the stuck one's store holds its read, want it, still open", open)
	}
	d.gate()
	waitFor(t, func() bool { return e.transfers.Open() == 0 })
	<-d.read
}
