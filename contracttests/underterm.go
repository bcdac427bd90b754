package contracttests

import (
	"context"
	"fmt"
	"time"

	"github.com/abi-engine/engine/ports"
)

// UnderTerm is a view of a keyvalue handle whose every call carries the
// fencing token of one serving term, as the engine's calls do. A store
// that keeps reads for a term (KeepsReads) runs the keyvalue contract a
// second time through such views, so that every case, races and expiry
// included, goes through what it keeps: the harness returns views of one
// handle, since one engine serves a term through one handle. Closing a
// view leaves the handle open for the others.
type UnderTerm struct {
	KV interface {
		ports.KeyValue
		ports.Expirer
	}
	Token uint64
}

var _ ports.Expirer = UnderTerm{}

func (v UnderTerm) ctx(ctx context.Context) context.Context {
	return ports.WithFencingToken(ctx, v.Token)
}

func (v UnderTerm) Get(ctx context.Context, key string) ([]byte, error) {
	return v.KV.Get(v.ctx(ctx), key)
}

func (v UnderTerm) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return v.KV.Set(v.ctx(ctx), key, value, ttl)
}

func (v UnderTerm) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	return v.KV.SetIfAbsent(v.ctx(ctx), key, value, ttl)
}

func (v UnderTerm) Delete(ctx context.Context, key string) (bool, error) {
	return v.KV.Delete(v.ctx(ctx), key)
}

func (v UnderTerm) DeleteIfValue(ctx context.Context, key string, value []byte) (bool, error) {
	return v.KV.DeleteIfValue(v.ctx(ctx), key, value)
}

func (v UnderTerm) Exists(ctx context.Context, key string) (bool, error) {
	return v.KV.Exists(v.ctx(ctx), key)
}

func (v UnderTerm) ListKeys(ctx context.Context, prefix string, limit int, cursor string) ([]string, string, error) {
	return v.KV.ListKeys(v.ctx(ctx), prefix, limit, cursor)
}

func (v UnderTerm) DeleteExpired(ctx context.Context) (int, error) {
	return v.KV.DeleteExpired(v.ctx(ctx))
}

// Close leaves the handle open.
func (v UnderTerm) Close() error { return nil }

func (v UnderTerm) String() string { return fmt.Sprintf("term %d", v.Token) }
