package natsapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	"github.com/abi-engine/engine/adapters/secondary/natsclient"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// fencedObjects is an object store fenced as a shared store may be, the
// way an adapter a team writes might do it: it keeps the newest fencing
// token a Put brought and refuses a Put of an older term with
// ports.ErrFenced, storing nothing; a Put without a token passes. It notes
// the token every Put and Get brought.
type fencedObjects struct {
	ports.ObjectStorage

	mu     sync.Mutex
	newest uint64
	seen   []string
}

func (f *fencedObjects) note(ctx context.Context, what, key string) (uint64, bool) {
	token, ok := ports.FencingToken(ctx)
	f.seen = append(f.seen, fmt.Sprintf("%s %s under term %d", what, key, token))
	return token, ok
}

// Put reads the whole object, then checks the token and stores it in one
// step, as a store checks it in the transaction of the write.
func (f *fencedObjects) Put(ctx context.Context, key string, r io.Reader, opts ports.PutObjectOptions) (ports.ObjectInfo, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return ports.ObjectInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if token, ok := f.note(ctx, "put", key); ok {
		if token < f.newest {
			return ports.ObjectInfo{}, fmt.Errorf("%w: put %q under term %d, the store has seen term %d", ports.ErrFenced, key, token, f.newest)
		}
		f.newest = token
	}
	return f.ObjectStorage.Put(ctx, key, bytes.NewReader(data), opts)
}

func (f *fencedObjects) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	f.mu.Lock()
	f.note(ctx, "get", key)
	f.mu.Unlock()
	return f.ObjectStorage.Get(ctx, key, opts)
}

func (f *fencedObjects) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.seen)
}

// underTerm is a host admitting every call under the term token gives.
func underTerm(token *atomic.Uint64) engineOptions {
	return engineOptions{host: natsapi.Options{Admit: func() (uint64, bool) { return token.Load(), true }}}
}

// An object moves through a transfer, whose store calls run after the call
// that opened it has been answered; they carry the fencing token of the
// term that call was admitted under, as the store call of a plain call
// does.
func TestEveryStoreCallOfATransferCarriesTheTokenOfItsTerm(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := &fencedObjects{ObjectStorage: newObjects(t)}
	var term atomic.Uint64
	term.Store(7)
	newEngine(t, url, store, underTerm(&term))
	objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	if _, err := objects.Put(ctx, "k", strings.NewReader(strings.Repeat("x", 600<<10)), ports.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	r, _, err := objects.Get(ctx, "k", ports.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, r); err != nil || n != 600<<10 {
		t.Fatalf("read %d bytes (%v), want %d", n, err, 600<<10)
	}
	_ = r.Close()
	want := []string{"put k under term 7", "get k under term 7"}
	if got := store.calls(); !slices.Equal(got, want) {
		t.Fatalf("the store saw %q, want %q", got, want)
	}
}

// An upload still open on the old engine at a handover goes on there while
// its successor serves: a shared store that fences must see it as the old
// term's, and refuse it once the successor has written, or the old engine
// stores over what the successor wrote after it began serving.
func TestAnUploadOfAnOlderTermIsRefusedOnceItsSuccessorWrote(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := &fencedObjects{ObjectStorage: newObjects(t)}
	var oldTerm, newTerm atomic.Uint64
	oldTerm.Store(7)
	newTerm.Store(9)
	old := newEngine(t, url, store, underTerm(&oldTerm))
	objects := natsclient.NewObjectStorage(natsclient.New(natstest.Connect(t, url)))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	src := newGatedReader(strings.Repeat("o", 200<<10), strings.Repeat("o", 300<<10))
	put := make(chan error, 1)
	go func() {
		_, err := objects.Put(ctx, "k", src, ports.PutObjectOptions{})
		put <- err
	}()
	select {
	case <-src.reached:
	case err := <-put:
		t.Fatalf("the old engine's upload ended before the handover: %v", err)
	}

	// The handover: the successor serves under a newer term, and the old
	// engine takes no new call but finishes the transfer it holds.
	newEngine(t, url, store, underTerm(&newTerm))
	if err := old.host.StopAccepting(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := objects.Put(ctx, "k", strings.NewReader("the successor's"), ports.PutObjectOptions{}); err != nil {
		t.Fatalf("the successor's put: %v", err)
	}

	close(src.gate)
	select {
	case err := <-put:
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("the old engine's upload, ended after its successor wrote: %v, want 503 (fenced)", err)
		}
	case <-ctx.Done():
		t.Fatal("the old engine's upload never ended")
	}
	r, _, err := store.ObjectStorage.Get(ctx, "k", ports.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := io.ReadAll(r); err != nil || string(got) != "the successor's" {
		t.Fatalf("k holds %d bytes starting %.10q (%v), want the successor's object", len(got), got, err)
	}
}

// A transfer runs under the term of the lease it was opened under. Once
// the engine serves under another, its next call closes it, and an upload
// so closed stores nothing: its store calls carry the ended term's token.
func TestATransferIsClosedByACallUnderANewerTerm(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store := newObjects(t)
	var term atomic.Uint64
	term.Store(7)
	admit := func() (uint64, bool) { return term.Load(), true }
	e := newEngine(t, url, store, engineOptions{
		host:      natsapi.Options{Admit: admit},
		transfers: natsapi.TransferOptions{Admit: admit, ChunkSize: 4},
	})
	nc := natstest.Connect(t, url)
	opened, err := openTransfer(t, nc, wire.TransferOpen{Mode: wire.TransferPut, Key: "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(t, nc, opened, 0, "abcd"); err != nil {
		t.Fatal(err)
	}
	term.Store(8)
	if err := write(t, nc, opened, 1, "efgh"); !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "term 7") {
		t.Fatalf("a write under a newer term than its transfer's: %v, want 503 naming term 7", err)
	}
	if open := e.transfers.Open(); open != 0 {
		t.Fatalf("%d transfers open after a call under a newer term, want none", open)
	}
	if _, err := sessionCall(nc, transferSubject(opened.ID, wire.SessionCommit), opened.Ref(), -1, []byte(`{"chunks":1}`), nil); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("a commit after the transfer was closed: %v, want 404", err)
	}
	if _, err := store.Stat(t.Context(), "k"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("stat of the object of a closed upload: %v, want not found", err)
	}
}
