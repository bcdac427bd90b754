package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	objmemory "github.com/abi-engine/engine/adapters/secondary/objectstorage/memory"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/natstest"
	"github.com/abi-engine/engine/internal/testenv"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// A load counts only right answers. A responder that answers every call
// at once with the wrong value stands for an engine (or echo) that has
// gone wrong in a way no real one can be made to on purpose: were its
// answers counted, the bench would print a fine figure for a broken path.
func TestALoadWhoseAnswersAreWrongFailsInsteadOfCountingThem(t *testing.T) {
	nc := natstest.Connect(t, natstest.StartServer(t).ClientURL())
	stale, err := json.Marshal(wire.KVValue{Value: wire.Bytes("not the bench's value")})
	if err != nil {
		t.Fatal(err)
	}
	respond := func(subject string, data []byte) {
		if _, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(data) }); err != nil {
			t.Fatal(err)
		}
	}
	respond(wire.Subject(ports.ServiceKeyValue, wire.KVGet), stale)
	respond(echoSubject, []byte(`{"key":"other"}`))
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(nc *nats.Conn) func(ctx context.Context, _ int) error{
		"keyvalue get": engineGet,
		"raw echo":     rawCall,
	} {
		st, err := drive(t.Context(), 1, 100*time.Millisecond, call(nc))
		if err == nil {
			t.Errorf("%s: a load of wrong answers measured %.1f calls/s, want an error", name, st.rps)
		}
	}
}

// otherBytes is an object store whose gets answer the object with one
// byte changed in its middle: the length and the description are right,
// the bytes are not. No real store can be made to do this on purpose.
type otherBytes struct{ ports.ObjectStorage }

func (s otherBytes) Get(ctx context.Context, key string, opts ports.GetObjectOptions) (io.ReadCloser, ports.ObjectInfo, error) {
	rc, info, err := s.ObjectStorage.Get(ctx, key, opts)
	if err != nil {
		return nil, info, err
	}
	data, err := io.ReadAll(rc)
	if err = errors.Join(err, rc.Close()); err != nil {
		return nil, info, err
	}
	data[len(data)/2] ^= 0xff
	return io.NopCloser(bytes.NewReader(data)), info, nil
}

// serveObjects serves store's objects from this process on the broker at
// url, as an engine does, until the test ends.
func serveObjects(t *testing.T, url string, store ports.ObjectStorage) {
	t.Helper()
	owner := domain.NewInstanceID()
	session := natstest.Connect(t, url)
	transfers, err := natsapi.NewTransferHost(natsapi.TransferOptions{Owner: owner, Conn: session})
	if err != nil {
		t.Fatal(err)
	}
	overflow, err := natsapi.NewOverflowHost(natsapi.OverflowOptions{Owner: owner, Conn: session})
	if err != nil {
		t.Fatal(err)
	}
	host, err := natsapi.NewHost(natsapi.Options{
		Owner:    owner,
		Connect:  func() (*nats.Conn, error) { return nats.Connect(url) },
		Replies:  session,
		Overflow: overflow,
	}, natsapi.ObjectStorage(store, transfers))
	if err != nil {
		t.Fatal(err)
	}
	for _, serve := range []func() error{transfers.Serve, overflow.Serve, host.Serve} {
		if err := serve(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		host.Stop()
		transfers.Stop()
		overflow.Stop()
	})
}

// An object get is counted only when it reads back the bytes put, every
// one of them: a get of the right length with other bytes fails the
// object load instead of giving obj_get_mib_s a figure.
func TestAnObjectGetOfOtherBytesFailsTheLoad(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	store, err := objmemory.Open(t.Context(), objmemory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	serveObjects(t, url, otherBytes{store})
	b := &bench{duration: time.Millisecond}
	err = b.objects(natstest.Connect(t, url))(t.Context())
	if err == nil {
		t.Fatalf("a get answering other bytes measured put %v and get %v MiB/s, want an error",
			deref(b.result.ObjPutMiBS), deref(b.result.ObjGetMiBS))
	}
	if b.result.ObjGetMiBS != nil || b.result.ObjPutMiBS != nil {
		t.Errorf("a failed object load left figures: put %v, get %v", b.result.ObjPutMiBS, b.result.ObjGetMiBS)
	}
	t.Logf("the load failed: %v", err)
}

// A get that reads fewer bytes than were put, or more, fails the load as
// one that reads other bytes does; one that reads them all is measured.
func TestAnObjectGetMustReadExactlyTheBytesPut(t *testing.T) {
	data := []byte("the object of the transfers")
	b := &bench{duration: time.Millisecond}
	put := func(context.Context) error { return nil }
	for name, c := range map[string]struct {
		read []byte
		ok   bool
	}{
		"All":      {data, true},
		"TooFew":   {data[:len(data)-1], false},
		"TooMany":  {append(slices.Clone(data), '!'), false},
		"OtherEnd": {append(slices.Clone(data[:len(data)-1]), '?'), false},
	} {
		get := func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(c.read)), nil }
		_, rate, err := b.transfers(t.Context(), data, put, get)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", name, err)
		case !c.ok && err == nil:
			t.Errorf("%s: a get of %q measured %v MiB/s, want an error", name, c.read, rate)
		}
	}
}

// fakeEngine stands for the engine process: a script that says it serves
// and waits for its signal, while the test answers the engine's calls
// from its own process.
func fakeEngine(t *testing.T) *lab {
	t.Helper()
	l, err := newLab()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.stop)
	l.engine = filepath.Join(l.dir, "engine")
	if err := os.WriteFile(l.engine, []byte("#!/bin/sh\necho state=serving\nexec sleep 600\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return l
}

// answerKeyValue answers keyvalue gets with the bench's value, and sets
// of the key every scenario writes first; every other set fails, as on a
// store that has run out of room.
func answerKeyValue(t *testing.T, nc *nats.Conn) {
	t.Helper()
	got, err := json.Marshal(wire.KVValue{Value: wire.Bytes(value)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe(wire.Subject(ports.ServiceKeyValue, wire.KVGet), func(m *nats.Msg) { _ = m.Respond(got) }); err != nil {
		t.Fatal(err)
	}
	_, err = nc.Subscribe(wire.Subject(ports.ServiceKeyValue, wire.KVSet), func(m *nats.Msg) {
		var set struct{ Key string }
		if json.Unmarshal(m.Data, &set) == nil && set.Key == "bench" {
			_ = m.Respond([]byte("{}"))
			return
		}
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set(wire.ErrorCodeHeader, "500")
		reply.Header.Set(wire.ErrorHeader, "the store is full")
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// A set load that fails measured nothing: its field stays null in the
// JSON (and "-" in the table), never 0 calls/s.
func TestASetLoadThatFailsLeavesItsFigureNull(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	answerKeyValue(t, natstest.Connect(t, url))
	nc := natstest.Connect(t, url)
	b := &bench{lab: fakeEngine(t), duration: 20 * time.Millisecond}
	failedSets := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "the store is full") {
			t.Fatalf("the engine on %s: %v, want its sets to fail", what, err)
		}
	}
	failedSets("SQLite", b.sqliteEngine(t.Context(), url, nc, natsKV{}))
	if b.result.KVSetRPSSQLite != nil {
		t.Errorf("kv_set_rps_sqlite is %v after its load failed, want null", *b.result.KVSetRPSSQLite)
	}
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL server, so the set on PostgreSQL is not tried", false)
	failedSets("PostgreSQL", b.postgres(t.Context(), url, nc, dsn))
	if b.result.KVSetRPSPostgres != nil {
		t.Errorf("kv_set_rps_postgres is %v after its load failed, want null", *b.result.KVSetRPSPostgres)
	}
}

// The pgx peer reads and writes at the isolation the engine's PostgreSQL
// store does, READ COMMITTED, whatever the server, role or dsn would make
// a connection's default: at a stricter one it would pay for checks the
// engine's statements do not, and the ratios would flatter the engine.
func TestThePGXPeerRunsAtTheEnginesIsolation(t *testing.T) {
	dsn := testenv.Lookup(t, "ENGINE_TEST_PG_DSN", "PostgreSQL server", false)
	const serializable = "-c default_transaction_isolation=serializable"
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		q := u.Query()
		q.Set("options", serializable)
		u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
		dsn = u.String()
	} else {
		dsn += " options='" + serializable + "'"
	}
	table := fmt.Sprintf("enginebench_pgx_isolation_%d", time.Now().UnixNano())
	t.Cleanup(func() { dropTable(dsn, table) })
	peer, err := newPGXPeer(t.Context(), dsn, table)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(peer.pool.Close)
	// Every connection of the pool, not only the one that made the table.
	conns := make([]*pgxpool.Conn, 0, peer.pool.Config().MaxConns)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Release()
		}
	})
	for range cap(conns) {
		c, err := peer.pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var level string
		if err := c.QueryRow(t.Context(), "SHOW transaction_isolation").Scan(&level); err != nil {
			t.Fatal(err)
		}
		if level != "read committed" {
			t.Fatalf("a connection of the pgx peer runs at %q, want read committed, as the engine's store does", level)
		}
	}
}
