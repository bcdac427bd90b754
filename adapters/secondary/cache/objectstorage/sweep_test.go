package objectstorage_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/abi-engine/engine/adapters/secondary/cache/objectstorage"
	"github.com/abi-engine/engine/internal/expiry"
	"github.com/abi-engine/engine/ports"
)

// sweeperOf returns the tier as the ports.Expirer it must be over an
// object store that can delete on condition, or skips over one that
// cannot, where it must be none.
func sweeperOf(t *testing.T, tier ports.Cache, objects ports.ObjectStorage) ports.Expirer {
	t.Helper()
	sweeper, ok := tier.(ports.Expirer)
	if _, can := objects.(ports.ConditionalObjectDeleter); !can {
		if ok {
			t.Fatalf("the tier over %T, which cannot delete on condition, sweeps: a sweep would remove entries written after it read them", objects)
		}
		t.Skipf("%T cannot delete on condition: the tier has no sweep", objects)
	}
	if !ok {
		t.Fatalf("the tier over %T, which can delete on condition, is no ports.Expirer: its expired entries stay in the object store for good", objects)
	}
	return sweeper
}

// expiredHeader is the header of an entry that expired long ago.
func expiredHeader() []byte { return binary.BigEndian.AppendUint64(nil, 1) }

// Expired entries that no call reads or writes again are removed by a
// sweep, and nothing else is: live entries, objects under the prefix
// that are no entries or are not named as entries, and objects outside
// it stay.
func TestASweepRemovesTheExpiredEntriesNoCallReadsAgain(t *testing.T) {
	everyStore(t, func(t *testing.T, objects ports.ObjectStorage) {
		tier := openTier(t, objectstorage.Config{}, objects)
		sweeper := sweeperOf(t, tier, objects)
		for key, ttl := range map[string]time.Duration{"keep/none": 0, "keep/long": time.Hour, "gone/a": ports.MinTTL, "gone/b": ports.MinTTL} {
			if err := tier.Set(t.Context(), key, []byte("v"), ttl); err != nil {
				t.Fatalf("Set %q: %v", key, err)
			}
		}
		planted := map[string][]byte{
			// Not named as an entry, though it reads as an expired one.
			objectstorage.DefaultPrefix + "theirs": append(expiredHeader(), "v"...),
			// Named as an entry, outside the prefix.
			"elsewhere/" + strings.TrimPrefix(objectOf("x"), objectstorage.DefaultPrefix): append(expiredHeader(), "v"...),
			// Named as an entry, and too short to be one.
			objectOf("short"): []byte("abc"),
		}
		for okey, content := range planted {
			if _, err := objects.Put(t.Context(), okey, bytes.NewReader(content), ports.PutObjectOptions{}); err != nil {
				t.Fatalf("plant %q: %v", okey, err)
			}
		}
		// The probe, written last, expires last: once it has, so have the
		// two. Only the probe is read before the sweep.
		if err := tier.Set(t.Context(), "probe", []byte("v"), ports.MinTTL); err != nil {
			t.Fatalf("Set probe: %v", err)
		}
		awaitGone(t, tier, "probe")
		if n, err := sweeper.DeleteExpired(t.Context()); err != nil || n != 3 {
			t.Fatalf("DeleteExpired = %d, %v; want the 3 expired entries", n, err)
		}
		for _, key := range []string{"gone/a", "gone/b", "probe"} {
			if _, err := objects.Stat(t.Context(), objectOf(key)); !errors.Is(err, ports.ErrNotFound) {
				t.Errorf("the object of the expired entry %q after a sweep: Stat err %v, want ErrNotFound", key, err)
			}
		}
		for okey := range planted {
			if _, err := objects.Stat(t.Context(), okey); err != nil {
				t.Errorf("the sweep removed %q, which is no entry of the tier's: Stat: %v", okey, err)
			}
		}
		for _, key := range []string{"keep/none", "keep/long"} {
			if v, err := tier.Get(t.Context(), key); err != nil || string(v) != "v" {
				t.Errorf("Get of the live entry %q after a sweep = %q, %v", key, v, err)
			}
		}
		if n, err := sweeper.DeleteExpired(t.Context()); err != nil || n != 0 {
			t.Fatalf("a second DeleteExpired = %d, %v; want 0", n, err)
		}
	})
}

// rewriter is an object store whose hooks run once, on the sweep's own
// goroutine, after its first listing and before its first delete: where
// another engine's Set would land in a race the test cannot time
// otherwise.
type rewriter struct {
	ports.ObjectStorage
	afterList, beforeDelete func()
}

func (r *rewriter) List(ctx context.Context, prefix string, limit int, cursor string) ([]ports.ObjectInfo, string, error) {
	infos, next, err := r.ObjectStorage.List(ctx, prefix, limit, cursor)
	if f := r.afterList; f != nil {
		r.afterList = nil
		f()
	}
	return infos, next, err
}

func (r *rewriter) DeleteIfMatch(ctx context.Context, key, etag string) (bool, error) {
	r.deleting()
	return r.ObjectStorage.(ports.ConditionalObjectDeleter).DeleteIfMatch(ctx, key, etag)
}

// Delete runs the hook too: a sweep must not delete blind, and if it did
// the rewrite would still come first.
func (r *rewriter) Delete(ctx context.Context, key string) error {
	r.deleting()
	return r.ObjectStorage.Delete(ctx, key)
}

func (r *rewriter) deleting() {
	if f := r.beforeDelete; f != nil {
		r.beforeDelete = nil
		f()
	}
}

// An entry written again after a sweep listed it, or after it read it
// expired, is the new entry, which the sweep keeps: it deletes only the
// version it judged.
func TestASweepKeepsAnEntryWrittenAgainAfterItJudgedTheOldOne(t *testing.T) {
	everyStore(t, func(t *testing.T, objects ports.ObjectStorage) {
		if _, can := objects.(ports.ConditionalObjectDeleter); !can {
			t.Skipf("%T cannot delete on condition: the tier has no sweep", objects)
		}
		other := openTier(t, objectstorage.Config{}, objects) // another engine's
		for _, when := range []string{"afterList", "beforeDelete"} {
			t.Run(when, func(t *testing.T) {
				key := "k/" + when
				if err := other.Set(t.Context(), key, []byte("old"), ports.MinTTL); err != nil {
					t.Fatalf("Set: %v", err)
				}
				awaitGone(t, other, key)
				rewrite := func() {
					if err := other.Set(t.Context(), key, []byte("new"), time.Hour); err != nil {
						t.Errorf("Set again: %v", err)
					}
				}
				hooked := &rewriter{ObjectStorage: objects}
				if when == "afterList" {
					hooked.afterList = rewrite
				} else {
					hooked.beforeDelete = rewrite
				}
				tier := openTier(t, objectstorage.Config{}, hooked)
				sweeper := sweeperOf(t, tier, hooked)
				if n, err := sweeper.DeleteExpired(t.Context()); err != nil || n != 0 {
					t.Errorf("DeleteExpired = %d, %v; want 0, the entry written again kept", n, err)
				}
				if hooked.afterList != nil || hooked.beforeDelete != nil {
					t.Fatalf("the sweep never reached the moment of the rewrite (%s)", when)
				}
				if v, err := tier.Get(t.Context(), key); err != nil || string(v) != "new" {
					t.Fatalf("Get of an entry written again during a sweep = %q, %v; want %q", v, err, "new")
				}
			})
		}
	})
}

// A sweep looks at a bounded number of pages of the tier's listing, and
// the next goes on after them, so that every expired entry goes in turn
// however many the cache holds.
func TestASweepLooksAtBoundedPagesAndTheNextGoesOn(t *testing.T) {
	objects := openMemory(t)
	tier := openTier(t, objectstorage.Config{}, objects)
	sweeper := sweeperOf(t, tier, objects)
	objectstorage.SetSweepPages(tier.(*objectstorage.SweptStore), 1)
	const extra = 10
	for i := range expiry.Batch + extra {
		if err := tier.Set(t.Context(), fmt.Sprint("gone/", i), []byte("v"), ports.MinTTL); err != nil {
			t.Fatalf("Set: %v", err)
		}
	}
	awaitGone(t, tier, fmt.Sprint("gone/", expiry.Batch+extra-1))
	for i, want := range []int{expiry.Batch, extra, 0} {
		if n, err := sweeper.DeleteExpired(t.Context()); err != nil || n != want {
			t.Fatalf("sweep %d of one page = %d, %v; want %d", i+1, n, err, want)
		}
	}
	if infos, _, err := objects.List(t.Context(), objectstorage.DefaultPrefix, 0, ""); err != nil || len(infos) != 0 {
		t.Fatalf("after the sweeps %d objects are left under the prefix (%v); want none", len(infos), err)
	}
}

// Over an object store that cannot delete on condition, S3 here, the tier
// has no sweep, and Open warns the operator so, naming the store and the
// prefix and what to do; over one that can, it says nothing. Expired
// entries used to fill the bucket with no word at start.
func TestOpenWarnsOverAnObjectStoreTheTierCannotSweep(t *testing.T) {
	everyStore(t, func(t *testing.T, objects ports.ObjectStorage) {
		var logs bytes.Buffer
		const prefix = "warned-cache/"
		tier := openTier(t, objectstorage.Config{Prefix: prefix, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, objects)
		var warnings []map[string]any
		for line := range bytes.Lines(logs.Bytes()) {
			var rec map[string]any
			if err := json.Unmarshal(line, &rec); err != nil {
				t.Fatalf("a log line is no JSON record: %q: %v", line, err)
			}
			if rec["level"] == slog.LevelWarn.String() {
				warnings = append(warnings, rec)
			}
		}
		if _, sweeps := tier.(ports.Expirer); sweeps {
			if len(warnings) != 0 {
				t.Fatalf("the tier over %T, which sweeps, warned at Open: %v", objects, warnings)
			}
			return
		}
		if len(warnings) != 1 {
			t.Fatalf("the tier over %T, which has no sweep, logged %d warnings at Open, want 1: %s", objects, len(warnings), logs.String())
		}
		w := warnings[0]
		if w["store"] != fmt.Sprintf("%T", objects) || w["prefix"] != prefix {
			t.Errorf("the warning names store %v and prefix %v, want %T and %q: %v", w["store"], w["prefix"], objects, prefix, w)
		}
		if msg, _ := w["msg"].(string); !strings.Contains(msg, "no sweep") || !strings.Contains(msg, "to reclaim the space") {
			t.Errorf("the warning does not say the tier has no sweep and how to reclaim the space: %q", msg)
		}
	})
}
