// Package rediskv is a keyvalue adapter on Redis, written as a team outside
// this repository would write one: it uses the engine's public packages
// only (ports, storecheck, and in its tests contracttests), lives in a
// module of its own, and reaches engine.yaml through the storage registry
// from its own engine command (cmd/engine-redis).
//
// Values live under Config.Prefix+"v:"+key with Redis's own expiry; a
// sorted set at Config.Prefix+"index" lists the keys in byte order, since
// ListKeys pages in order and SCAN does not. Every write changes both in
// one Lua script, so a reader never sees one without the other. Redis
// forgets an expired value itself but not its member in the index: ListKeys
// drops the ones it walks past, and DeleteExpired (the engine's sweep) the
// rest. Scripts
// touch keys they compute, so the adapter wants one Redis server (or a
// primary with replicas), not Redis Cluster.
//
// Engines share the server, so the store is fenced (ADR 0002): the key
// Config.Prefix+"fence" holds the newest fencing token a write carried, and
// every write script compares the write's token with it before it changes
// anything, refusing one of an older serving term with ports.ErrFenced. The
// check and the write are one script, which Redis runs alone, so no write
// of a newer term can come between them.
package rediskv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

// Config is the block under services.keyvalue.config in engine.yaml.
type Config struct {
	// Addr is the server's host:port.
	Addr string `yaml:"addr"`
	// Username and Password authenticate (Redis ACL); both may be empty.
	Username string `yaml:"username"`
	Password string `yaml:"password" secret:"true"`
	// DB is the database number, 0 by default.
	DB int `yaml:"db"`
	// Prefix goes before every Redis key the adapter writes, so engines of
	// several NATS accounts can share a server. Default "abi:kv:".
	Prefix string `yaml:"prefix"`
}

// DefaultPrefix is the Prefix of a Config that gives none.
const DefaultPrefix = "abi:kv:"

// LocalStorage implements ports.StorageConfig: the data is on a server
// every engine reaches, so a rollout may hand it over.
func (Config) LocalStorage() string { return "" }

// Store is a ports.KeyValue on one Redis server. It is safe for concurrent
// use.
type Store struct {
	rdb       *redis.Client
	data      string // prefix of value keys
	index     string // the sorted set of keys
	fence     string // the newest fencing token a write carried
	closeOnce sync.Once
	closeErr  error
}

var _ ports.KeyValue = (*Store)(nil)

// Open checks the configuration and connects, failing when the server does
// not answer.
func Open(ctx context.Context, c Config) (*Store, error) { return open(ctx, c, nil) }

// open is Open with tune, when not nil, run on the client's options before
// the client is made.
func open(ctx context.Context, c Config, tune func(*redis.Options)) (*Store, error) {
	if c.Addr == "" {
		return nil, fmt.Errorf("redis keyvalue: addr is empty: %w", ports.ErrInvalidArgument)
	}
	if c.DB < 0 {
		return nil, fmt.Errorf("redis keyvalue: db %d is negative: %w", c.DB, ports.ErrInvalidArgument)
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	// MaxRetries -1: the client sends nothing again. go-redis otherwise
	// sends a command again when its connection breaks before the reply,
	// and a write that had run then runs twice: a SetIfAbsent that took
	// the key answers that it was taken, a DeleteIfValue that deleted
	// answers that the value was not there. Without the retry, such a call
	// fails, which is all its caller can be told.
	opts := &redis.Options{Addr: c.Addr, Username: c.Username, Password: c.Password, DB: c.DB, MaxRetries: -1}
	if tune != nil {
		tune(opts)
	}
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis keyvalue: connect to %s: %w", c.Addr, err)
	}
	return &Store{rdb: rdb, data: c.Prefix + "v:", index: c.Prefix + "index", fence: c.Prefix + "fence"}, nil
}

// Close closes the connections; closing twice is harmless.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.rdb.Close() })
	return s.closeErr
}

// wrap names the call and the key of a server error.
func wrap(call, key string, err error) error {
	return fmt.Errorf("redis keyvalue: %s %.40q: %w", call, key, err)
}

// ttlMillis is a TTL as Redis's PX takes it; 0 keeps the value until
// deleted. storecheck has refused a TTL under ports.MinTTL, a millisecond,
// which would round to 0 here and never expire.
func ttlMillis(ttl time.Duration) int64 { return ttl.Milliseconds() }

// Get implements ports.KeyValue.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := storecheck.Key("key", key); err != nil {
		return nil, err
	}
	v, err := s.rdb.Get(ctx, s.data+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("key %q: %w", key, ports.ErrNotFound)
	}
	if err != nil {
		return nil, wrap("get", key, err)
	}
	return v, nil
}

// fenceCheck opens every write script. KEYS[3] is the fence and ARGV[1]
// the write's fencing token in decimal, "" for a write without one, which
// passes. A token below the fence refuses the write (the script returns -1
// before it changes anything); a higher one raises the fence, even when
// the write then changes nothing, as a SetIfAbsent of a key that is set
// does. Tokens are uint64: they are compared as decimal strings, shorter
// first, since Lua's numbers are doubles and lose digits past 2^53.
const fenceCheck = `
local token = ARGV[1]
if token ~= '' then
	local seen = redis.call('GET', KEYS[3])
	if seen and (#token < #seen or (#token == #seen and token < seen)) then return -1 end
	if seen ~= token then redis.call('SET', KEYS[3], token) end
end
`

// tokenArg is the fencing token ctx carries, as fenceCheck reads it.
func tokenArg(ctx context.Context) string {
	if t, ok := ports.FencingToken(ctx); ok {
		return strconv.FormatUint(t, 10)
	}
	return ""
}

// setScript writes the value and lists the key. ARGV after the token:
// value, TTL in ms (0: none, which also clears an earlier TTL), "nx" to
// write only a key that is absent, and the key itself for the index.
var setScript = redis.NewScript(fenceCheck + `
local args = {'SET', KEYS[1], ARGV[2]}
if ARGV[3] ~= '0' then table.insert(args, 'PX'); table.insert(args, ARGV[3]) end
if ARGV[4] == 'nx' then table.insert(args, 'NX') end
if not redis.call(unpack(args)) then return 0 end
redis.call('ZADD', KEYS[2], 0, ARGV[5])
return 1
`)

func (s *Store) set(ctx context.Context, call, key string, value []byte, ttl time.Duration, nx string) (bool, error) {
	if err := storecheck.Write("key", key, ttl); err != nil {
		return false, err
	}
	n, err := setScript.Run(ctx, s.rdb, []string{s.data + key, s.index, s.fence}, tokenArg(ctx), value, ttlMillis(ttl), nx, key).Int()
	return written(call, key, n, err)
}

// Set implements ports.KeyValue.
func (s *Store) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	_, err := s.set(ctx, "set", key, value, ttl, "")
	return err
}

// SetIfAbsent implements ports.KeyValue: SET NX is atomic in Redis, and
// Redis has forgotten an expired key, so a key past its TTL is absent.
func (s *Store) SetIfAbsent(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	return s.set(ctx, "set if absent", key, value, ttl, "nx")
}

// written is the outcome of a write script: whether it changed the key,
// or ErrFenced when the fence refused it.
func written(call, key string, n int, err error) (bool, error) {
	switch {
	case err != nil:
		return false, wrap(call, key, notDone(err))
	case n < 0:
		return false, wrap(call, key, ports.ErrFenced)
	}
	return n == 1, nil
}

// deleteScript deletes the value, only if it equals ARGV[2] when ARGV[3]
// is "if", and unlists the key (ARGV[4]); ARGV[1] is the token.
var deleteScript = redis.NewScript(fenceCheck + `
if ARGV[3] == 'if' and redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[4])
return n
`)

func (s *Store) del(ctx context.Context, call, key string, value []byte, cond string) (bool, error) {
	if err := storecheck.Key("key", key); err != nil {
		return false, err
	}
	n, err := deleteScript.Run(ctx, s.rdb, []string{s.data + key, s.index, s.fence}, tokenArg(ctx), value, cond, key).Int()
	return written(call, key, n, err)
}

// notDone marks err, a write's, as ports.ErrNotDone when the client failed
// before it wrote the write to a connection, so Redis never saw it: no
// connection could be dialled (refused, unreachable, timed out), or none
// came free in the pool within its timeout. A failure after the write was
// sent, a read timeout or a broken connection, leaves the write done or
// not, and is returned as it is.
func notDone(err error) error {
	var op *net.OpError
	if errors.Is(err, redis.ErrPoolTimeout) || errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%w: %w", ports.ErrNotDone, err)
	}
	return err
}

// Delete implements ports.KeyValue.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	return s.del(ctx, "delete", key, nil, "")
}

// DeleteIfValue implements ports.KeyValue.
func (s *Store) DeleteIfValue(ctx context.Context, key string, value []byte) (bool, error) {
	return s.del(ctx, "delete if value", key, value, "if")
}

// Exists implements ports.KeyValue.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	if err := storecheck.Key("key", key); err != nil {
		return false, err
	}
	n, err := s.rdb.Exists(ctx, s.data+key).Result()
	if err != nil {
		return false, wrap("exists", key, err)
	}
	return n == 1, nil
}

// listScript walks the index in byte order from ARGV[1] (a ZRANGE BYLEX
// bound), returns up to ARGV[3] live keys that start with ARGV[2], and
// unlists keys whose value Redis has expired on the way. ARGV[4] is the
// prefix of value keys.
var listScript = redis.NewScript(`
local want, prefix, from = tonumber(ARGV[3]), ARGV[2], ARGV[1]
local out = {}
while #out < want do
	local batch = redis.call('ZRANGE', KEYS[1], from, '+', 'BYLEX', 'LIMIT', 0, want - #out + 16)
	if #batch == 0 then return out end
	for _, k in ipairs(batch) do
		if string.sub(k, 1, #prefix) ~= prefix then return out end
		if redis.call('EXISTS', ARGV[4] .. k) == 1 then
			table.insert(out, k)
			if #out == want then return out end
		else
			redis.call('ZREM', KEYS[1], k)
		end
		from = '(' .. k
	end
end
return out
`)

// ListKeys implements ports.KeyValue.
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
	from := "[" + prefix
	if cursor != "" && cursor >= prefix {
		from = "(" + cursor
	}
	// One key more than the page tells whether another page follows.
	keys, err := listScript.Run(ctx, s.rdb, []string{s.index}, from, prefix, limit+1, s.data).StringSlice()
	if err != nil {
		return nil, "", wrap("list keys", prefix, err)
	}
	if len(keys) <= limit {
		return keys, "", nil
	}
	keys = keys[:limit]
	return keys, keys[limit-1], nil
}

// sweepScript unlists, of up to ARGV[2] index members from ARGV[1] (a
// ZRANGE BYLEX bound), those whose value Redis has expired, in one step so
// that a Set between the check and the removal cannot be unlisted. It
// returns how many it removed and the last member it looked at ("" when
// none was left). ARGV[3] is the prefix of value keys.
var sweepScript = redis.NewScript(`
local batch = redis.call('ZRANGE', KEYS[1], ARGV[1], '+', 'BYLEX', 'LIMIT', 0, tonumber(ARGV[2]))
local removed = 0
for _, k in ipairs(batch) do
	if redis.call('EXISTS', ARGV[3] .. k) == 0 then
		redis.call('ZREM', KEYS[1], k)
		removed = removed + 1
	end
end
if #batch == 0 then return {removed, ''} end
return {removed, batch[#batch]}
`)

var _ ports.Expirer = (*Store)(nil)

// DeleteExpired implements ports.Expirer: Redis forgets an expired value
// itself, but not its member in the index, which a ListKeys removes only
// when it walks past it. The engine's sweep job calls this every minute,
// so keys written with a TTL and never listed do not grow the index
// without end.
func (s *Store) DeleteExpired(ctx context.Context) (int, error) {
	total, from := 0, "-"
	for {
		res, err := sweepScript.Run(ctx, s.rdb, []string{s.index}, from, 1000, s.data).Slice()
		if err != nil {
			return total, wrap("delete expired", "", err)
		}
		n, _ := res[0].(int64)
		last, _ := res[1].(string)
		total += int(n)
		if last == "" {
			return total, nil
		}
		from = "(" + last
	}
}
