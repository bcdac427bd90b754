// Package jetstream is a key-value store in a JetStream key-value bucket,
// which every engine of a NATS account reaches and a cluster replicates.
//
// Keys of any bytes are stored under an order-keeping base64 token (NATS
// keys allow few characters). Each key keeps one message: a value, or a
// deletion marker. Conditional writes are conditioned on the key's last
// revision, so the stream decides races. A TTL is a per-message TTL: the
// broker removes the message in its own time, and reads treat a value past
// its TTL as gone at once. Reads go to the stream's leader, so a write is
// seen by the next read on any engine, on a replicated bucket too.
//
// The store is fenced: a write under a fencing token expects the bucket's
// fence at its term, and one of an older term than the newest the bucket
// has seen is refused with ports.ErrFenced and stores nothing (jsbucket's
// OpenFenced, ADR 0020).
//
// ListKeys asks the leader for the bucket's keys and reads the page's keys
// one by one: its cost grows with the bucket, which suits buckets of up to
// some tens of thousands of keys.
package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/abi-engine/engine/adapters/secondary/internal/jsbucket"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

var _ ports.KeyValue = (*Store)(nil)

const (
	// DefaultBucket is the bucket used when the configuration names none.
	DefaultBucket = "ABI_KV"
	// casRounds bounds how often a conditional write re-reads after losing
	// a race to a write that did not decide its outcome (an expiry).
	casRounds = 32
)

// Config is the adapter's block under services.keyvalue.config.
type Config struct {
	// Bucket is the key-value bucket; default ABI_KV.
	Bucket string `yaml:"bucket"`
	// Replicas is 1, 3 or 5 (default 1), applied when the bucket is made.
	Replicas int `yaml:"replicas"`
	// Logger hears what an operator must know of the bucket, such as
	// markers of expiry the engine's user may not turn off; nil means
	// slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// LocalStorage implements ports.StorageConfig: the bucket is on the NATS
// servers every engine of the account reaches.
func (Config) LocalStorage() string { return "" }

// Default fills the bucket's name and replica count.
func (c *Config) Default(string) {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	c.Replicas = max(c.Replicas, 1)
}

// SetLogger implements storage.LoggerSetter.
func (c *Config) SetLogger(log *slog.Logger) { c.Logger = log }

// Check refuses bad settings, naming the key under prefix.
func (c Config) Check(prefix string) error { return jsbucket.Config(c).Check(prefix) }

// Describe names the bucket and its replicas.
func (c Config) Describe() string { return jsbucket.Config(c).Describe() }

// Store is the bucket on a connection.
type Store struct {
	b  *jsbucket.Bucket
	nc *nats.Conn
}

// Open opens the bucket on nc, creating it when it is missing. The store
// owns nc: Close closes it.
func Open(ctx context.Context, c Config, nc *nats.Conn) (*Store, error) {
	c.Default("")
	b, err := jsbucket.OpenFenced(ctx, nc, jsbucket.Config(c), "abi-engine keyvalue")
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("keyvalue jetstream: %w", err)
	}
	return &Store{b: b, nc: nc}, nil
}

// Close closes the store's connection; closing twice is harmless.
func (s *Store) Close() error {
	s.nc.Close()
	return nil
}

// Get returns the value unless it is missing, deleted or expired.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := storecheck.Key("key", key); err != nil {
		return nil, err
	}
	e, err := s.b.Last(ctx, jsbucket.Encode(key))
	if err != nil {
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	if !e.Live {
		return nil, fmt.Errorf("get %q: %w", key, ports.ErrNotFound)
	}
	return e.Value, nil
}

// Set writes the value with its TTL over whatever the key held.
func (s *Store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := storecheck.Write("key", key, ttl); err != nil {
		return err
	}
	if _, err := s.b.Put(ctx, jsbucket.Encode(key), value, ttl, nil); err != nil {
		return fmt.Errorf("set %q: %w", key, err)
	}
	return nil
}

// SetIfAbsent writes the value if the key has no live value: on a key
// without a message by expecting none, over a marker or an expired value
// by expecting its revision. A lost race is re-read: a live value there
// means another caller won.
func (s *Store) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if err := storecheck.Write("key", key, ttl); err != nil {
		return false, err
	}
	// A call of a newer term fences the older ones though it writes
	// nothing.
	if err := s.b.Fence(ctx); err != nil {
		return false, fmt.Errorf("set %q if absent: %w", key, err)
	}
	token := jsbucket.Encode(key)
	for round := range casRounds {
		if err := settle(ctx, round); err != nil {
			return false, fmt.Errorf("set %q if absent: %w", key, err)
		}
		e, err := s.b.Last(ctx, token)
		if err == nil && e.Lingering() {
			e, err = s.awaitRemoval(ctx, token, e)
		}
		if err != nil {
			return false, fmt.Errorf("set %q if absent: %w", key, err)
		}
		if e.Live {
			return false, nil
		}
		rev := e.Revision
		_, err = s.b.Put(ctx, token, value, ttl, &rev)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jsbucket.ErrConflict) {
			return false, fmt.Errorf("set %q if absent: %w", key, err)
		}
	}
	return false, fmt.Errorf("set %q if absent: the key changed %d times while writing: %w", key, casRounds, ports.ErrConflict)
}

// lingerWait bounds how long a conditional write waits for the broker to
// remove an expired value, beyond the whole second the broker's TTL may
// add; lingerPoll is how often it reads the key meanwhile.
const (
	lingerWait = 5 * time.Second
	lingerPoll = 50 * time.Millisecond
)

// awaitRemoval waits until the broker has removed the expired value e (it
// leaves a marker, or nothing) or written something else over it, and
// returns the key's last entry then. On a bucket that keeps the broker's
// markers of expiry (one whose markers Open could not turn off), writing
// over the value before that races the broker's removal: on a replicated
// stream the removal's marker can land after the write that won, hiding
// it, and a second caller then wins too. After lingerWait it gives up
// waiting and returns what it read.
func (s *Store) awaitRemoval(ctx context.Context, token string, e jsbucket.Entry) (jsbucket.Entry, error) {
	deadline := e.ExpiresAt.Add(time.Second + lingerWait) // a lingering value has an expiry
	t := time.NewTicker(lingerPoll)
	defer t.Stop()
	for e.Lingering() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return jsbucket.Entry{}, ctx.Err()
		case <-t.C:
		}
		next, err := s.b.Last(ctx, token)
		if err != nil {
			return jsbucket.Entry{}, err
		}
		e = next
	}
	return e, nil
}

// Delete writes a deletion marker over a live value.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	if err := storecheck.Key("key", key); err != nil {
		return false, err
	}
	return s.deleteIf(ctx, key, func([]byte) bool { return true })
}

// DeleteIfValue writes a deletion marker over the value if it is value.
func (s *Store) DeleteIfValue(ctx context.Context, key string, value []byte) (bool, error) {
	if err := storecheck.Key("key", key); err != nil {
		return false, err
	}
	return s.deleteIf(ctx, key, func(v []byte) bool { return bytes.Equal(v, value) })
}

// deleteIf deletes the live value if match says so, conditioned on the
// revision it read: of concurrent deleters exactly one succeeds.
func (s *Store) deleteIf(ctx context.Context, key string, match func([]byte) bool) (bool, error) {
	if err := s.b.Fence(ctx); err != nil {
		return false, fmt.Errorf("delete %q: %w", key, err)
	}
	token := jsbucket.Encode(key)
	for round := range casRounds {
		if err := settle(ctx, round); err != nil {
			return false, fmt.Errorf("delete %q: %w", key, err)
		}
		e, err := s.b.Last(ctx, token)
		if err != nil {
			return false, fmt.Errorf("delete %q: %w", key, err)
		}
		if !e.Live || !match(e.Value) {
			return false, nil
		}
		_, err = s.b.Remove(ctx, token, e.Revision)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, jsbucket.ErrConflict) {
			return false, fmt.Errorf("delete %q: %w", key, err)
		}
	}
	return false, fmt.Errorf("delete %q: the key changed %d times while deleting: %w", key, casRounds, ports.ErrConflict)
}

// settle waits before every round but the first.
func settle(ctx context.Context, round int) error {
	if round == 0 {
		return nil
	}
	return jsbucket.Settle(ctx, round-1)
}

// Exists reports whether the key holds a live value.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	if err := storecheck.Key("key", key); err != nil {
		return false, err
	}
	e, err := s.b.Last(ctx, jsbucket.Encode(key))
	if err != nil {
		return false, fmt.Errorf("exists %q: %w", key, err)
	}
	return e.Live, nil
}

// ListKeys lists the bucket's keys, keeps those after the cursor with the
// prefix in byte order, and reads them in order until the page has limit
// live ones and one more is found. The cursor is the page's last key, or
// "" when no live key follows.
func (s *Store) ListKeys(ctx context.Context, prefix string, limit int, cursor string) ([]string, string, error) {
	if err := storecheck.Prefix("prefix", prefix); err != nil {
		return nil, "", err
	}
	if err := storecheck.Prefix("cursor", cursor); err != nil {
		return nil, "", err
	}
	limit, err := storecheck.Limit("limit", limit)
	if err != nil {
		return nil, "", err
	}
	tokens, err := s.b.Tokens(ctx, ">")
	if err != nil {
		return nil, "", fmt.Errorf("list keys %q: %w", prefix, err)
	}
	var candidates []string
	for _, t := range tokens {
		k, err := jsbucket.Decode(t)
		if err != nil {
			continue // a key another client wrote outside this adapter's encoding
		}
		if strings.HasPrefix(k, prefix) && k > cursor {
			candidates = append(candidates, k)
		}
	}
	slices.Sort(candidates)
	// One live key more than the page tells whether another page follows:
	// keys after the page that are deleted or expired do not.
	keys := make([]string, 0, min(limit+1, len(candidates)))
	for _, k := range candidates {
		e, err := s.b.Last(ctx, jsbucket.Encode(k))
		if err != nil {
			return nil, "", fmt.Errorf("list keys %q: %w", prefix, err)
		}
		if !e.Live {
			continue
		}
		keys = append(keys, k)
		if len(keys) > limit {
			keys = keys[:limit]
			return keys, keys[limit-1], nil
		}
	}
	return keys, "", nil
}
