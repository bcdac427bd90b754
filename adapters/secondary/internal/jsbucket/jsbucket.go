// Package jsbucket is what the JetStream storage adapters share: a
// key-value bucket opened or created with checked settings, reads that go to
// the stream's leader, writes conditioned on a key's last revision, and
// per-key TTLs.
//
// Reads of a key never use direct get. On a replicated bucket a direct get
// may be answered by a replica that has not yet applied the last write, and
// the adapters decide conditional writes on what they read; the leader has
// every acknowledged write. Scans use batches of direct gets, behind a
// barrier that tells when a replica has caught up (see Scan).
package jsbucket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/abi-engine/engine/ports"
)

// Config is the block every JetStream adapter takes under
// services.<service>.config; each adapter has its own type of the same
// shape, for its own default bucket.
type Config struct {
	// Bucket is the key-value bucket's name.
	Bucket string `yaml:"bucket"`
	// Replicas is how many servers keep the bucket: 1, 3 or 5; 0 means 1.
	// It applies when the bucket is created; an existing bucket with
	// another count is refused.
	Replicas int `yaml:"replicas"`
	// Logger hears what an operator must know of the bucket, such as
	// markers of expiry the engine's user may not turn off; nil means
	// slog.Default(). An engine passes its own, which names the engine.
	Logger *slog.Logger `yaml:"-"`
}

var bucketName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// leaseBucket is the bucket the engine's lease lives in (the lease adapter's
// DefaultBucket). No store may take it: the store's keys would share the
// lease's stream, and its purges and limits would reach the lease key.
const leaseBucket = "ABI_ENGINE"

// Check refuses bad settings, naming the key under prefix
// ("services.keyvalue.config").
func (c Config) Check(prefix string) error {
	if !bucketName.MatchString(c.Bucket) {
		return fmt.Errorf("%s.bucket %q is not one or more of [A-Za-z0-9_-]: %w", prefix, c.Bucket, ports.ErrInvalidArgument)
	}
	if c.Bucket == leaseBucket {
		return fmt.Errorf("%s.bucket %q is the lease's bucket; a store there would write beside the lease key in its stream: %w",
			prefix, c.Bucket, ports.ErrInvalidArgument)
	}
	switch c.Replicas {
	case 0, 1, 3, 5:
	default:
		return fmt.Errorf("%s.replicas is %d, want 1, 3 or 5: %w", prefix, c.Replicas, ports.ErrInvalidArgument)
	}
	return nil
}

// replicas is the replica count, 0 read as 1.
func (c Config) replicas() int { return max(c.Replicas, 1) }

// logger is the Logger, nil read as slog.Default().
func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

// Describe says where the data is, for `engine config check`.
func (c Config) Describe() string {
	return fmt.Sprintf("JetStream bucket %s, %d replica(s)", c.Bucket, c.replicas())
}

const (
	// attemptTimeout bounds one request to the broker. A request that
	// times out, or finds no responder while a stream elects a leader, is
	// tried again within the caller's context.
	attemptTimeout = 3 * time.Second
	// defaultCallTimeout bounds a call whose context has no deadline.
	defaultCallTimeout = 30 * time.Second
	// markerTTL is how long a deletion marker stays. Markers keep a
	// deleted key's revision for watchers; after this they go, so deleted
	// keys do not pile up.
	markerTTL = time.Hour
	// duplicates is the stream's window of message ids, nats.go's for a
	// key-value bucket: a write resent within it under its id is stored
	// once.
	duplicates = 2 * time.Minute

	headerOperation = "KV-Operation"
	headerTTL       = "Nats-TTL"
	// headerMarkerReason marks the broker's own deletion markers.
	headerMarkerReason = "Nats-Marker-Reason"
	// headerExpiresIn is the TTL the caller asked for, to the nanosecond;
	// the broker keeps whole seconds (rounded up here) and removes the
	// message in its own time, so reads judge expiry by this header.
	headerExpiresIn = "Abi-TTL"
)

// ErrConflict is a write whose expected revision was not the key's.
var ErrConflict = errors.New("the key's revision moved")

// Bucket is one key-value bucket on one connection.
type Bucket struct {
	nc *nats.Conn
	// refusals are those the server tells nc (refusals.go).
	refusals *listeners
	js       jetstream.JetStream
	stream   jetstream.Stream
	name     string
	// prefix is the subject prefix of the bucket's keys, "$KV.<bucket>.".
	prefix string
	// api is the leader's message-get subject of the bucket's stream.
	api        string
	streamName string
	// direct is the subject of direct gets, which every replica answers.
	direct string
	kind   kind
	// replicas is how many servers keep the bucket.
	replicas int
	// fenced: writes under a fencing token are fenced (fence.go).
	fenced bool
	// fence holds the fence's records as this bucket last saw them, and
	// fenceRaised the newest token it found or raised every one of them at.
	fenceMu     sync.Mutex
	fence       [fenceShards]fenceRecord
	fenceRaised uint64
	// hold is a term whose raise of the fence is held back while
	// hold.held says so (HoldRaise).
	hold raiseHold
	// idle, on a replicated fenced bucket, holds the fence's records no
	// write of this bucket is conditioned on now.
	idle chan int
	// attempt bounds one attempt of a call (retry): attemptTimeout, or
	// longer in a test that holds an answer back.
	attempt time.Duration
}

// Open finds the key-value bucket, or creates it with the configured
// replicas, and refuses one whose settings the adapters cannot work with.
func Open(ctx context.Context, nc *nats.Conn, c Config, description string) (*Bucket, error) {
	return openKeyValue(ctx, nc, c, description, false)
}

// OpenFenced is Open of a bucket whose writes under a fencing token are
// fenced: one of an older term than the newest the bucket has seen is
// refused with ports.ErrFenced, and stores nothing (fence.go). Its stream
// must allow atomic batches; a bucket made without them is updated.
func OpenFenced(ctx context.Context, nc *nats.Conn, c Config, description string) (*Bucket, error) {
	return openKeyValue(ctx, nc, c, description, true)
}

func openKeyValue(ctx context.Context, nc *nats.Conn, c Config, description string, fenced bool) (*Bucket, error) {
	return open(ctx, nc, c, kind{
		stream: "KV_" + c.Bucket, prefix: "$KV." + c.Bucket + ".", fenced: fenced,
		create: func(ctx context.Context, js jetstream.JetStream) error {
			sc := keyValueStream(c, description)
			sc.AllowAtomicPublish = fenced
			_, err := js.CreateStream(ctx, sc)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				return nil
			}
			return err
		},
		check: checkKeyValue, adjust: dropMarkers,
	})
}

// OpenObjects finds the object store bucket, or creates it with the
// configured replicas. Its keys are the tokens under "$O.<bucket>.". A
// broker whose largest message (max_payload) cannot hold a chunk and its
// headers is refused: every object over a few bytes would fail.
//
// Its writes under a fencing token through Publish are fenced as
// OpenFenced's are; PublishUnfenced's never are. The fence's records are
// under "$O.<bucket>.=fence.", which the object store's stream does not
// list: the stream is updated to list them, and to allow atomic batches.
func OpenObjects(ctx context.Context, nc *nats.Conn, c Config, description string) (*Bucket, error) {
	if most := nc.MaxPayload(); most > 0 && most < ObjectMessageRoom {
		return nil, fmt.Errorf("jetstream bucket %s: the broker's max_payload is %d bytes, an object store needs at least %d (a chunk of %d and its headers); raise max_payload: %w",
			c.Bucket, most, ObjectMessageRoom, ObjectChunkSize, ports.ErrInvalidArgument)
	}
	return open(ctx, nc, c, kind{
		stream: "OBJ_" + c.Bucket, prefix: "$O." + c.Bucket + ".",
		fenced: true, fenceSubject: "$O." + c.Bucket + ".=fence.*",
		create: func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
				Bucket: c.Bucket, Description: description, Replicas: c.replicas(),
			})
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || errors.Is(err, jetstream.ErrBucketExists) {
				return nil
			}
			return err
		},
		check: checkObjects,
	})
}

// keyValueStream is the stream of a key-value bucket as nats.go makes it,
// with per-message TTLs and without the broker's markers of expiry
// (subject_delete_marker_ttl), which nats.go's CreateKeyValue turns on with
// them. The broker decides to leave such a marker when it removes an
// expired message that is its key's last, and on a replicated stream
// proposes it after a write of the key proposed meanwhile: the marker, a
// rollup of its key, then lands over that write and deletes it, though
// the write was acknowledged. Without markers the broker removes an
// expired message by its sequence, which takes no later write with it.
func keyValueStream(c Config, description string) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: "KV_" + c.Bucket, Description: description,
		Subjects:          []string{"$KV." + c.Bucket + ".>"},
		MaxMsgsPerSubject: 1, MaxBytes: -1, MaxMsgs: -1, MaxMsgSize: -1, MaxConsumers: -1,
		Storage: jetstream.FileStorage, Replicas: c.replicas(),
		AllowRollup: true, DenyDelete: true, AllowDirect: true, Discard: jetstream.DiscardNew,
		Duplicates: duplicates, AllowMsgTTL: true,
	}
}

// kind is what differs between key-value and object store buckets.
type kind struct {
	stream, prefix string
	create         func(ctx context.Context, js jetstream.JetStream) error
	check          func(c Config, sc jetstream.StreamConfig) error
	// fenced: writes under a fencing token are fenced.
	fenced bool
	// fenceSubject, if set, is a subject the stream must list for the
	// fence's records, which its other subjects do not cover.
	fenceSubject string
	// adjust, if set, changes what the bucket may have and the adapters
	// must not, once check has passed it.
	adjust func(ctx context.Context, log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, sc jetstream.StreamConfig)
}

// owns reports whether subject is one of the bucket's: a key's, or one of
// the JetStream API's for its stream.
func (k kind) owns(subject string) bool {
	return strings.HasPrefix(subject, k.prefix) || strings.HasSuffix(subject, "."+k.stream) || strings.Contains(subject, "."+k.stream+".")
}

// dropMarkers turns off the broker's markers of expiry on a bucket made
// with them (by an earlier engine, or by nats.go), since they can delete
// acknowledged writes (keyValueStream). It needs the engine's user to be
// allowed to update the stream ($JS.API.STREAM.UPDATE.KV_<bucket>);
// refused (which the server tells the connection, not the request), or
// failing within one request's time, it leaves the bucket as it was, which
// the adapters work with as before, and warns of it on log.
func dropMarkers(ctx context.Context, log *slog.Logger, nc *nats.Conn, js jetstream.JetStream, sc jetstream.StreamConfig) {
	if sc.SubjectDeleteMarkerTTL == 0 {
		return
	}
	sc.SubjectDeleteMarkerTTL = 0
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	// An operator must hear of a bucket left with its markers: on a
	// replicated bucket they can delete acknowledged writes.
	kept := func(why string) {
		log.Warn("a JetStream bucket keeps the broker's markers of expiry, which on a replicated bucket can delete acknowledged writes; allow the engine's user $JS.API.STREAM.UPDATE."+sc.Name+", or set subject_delete_marker_ttl to 0 on the stream",
			"stream", sc.Name, "why", why)
	}
	for attempt := 0; ; attempt++ {
		_, err := updateStream(ctx, nc, js, sc)
		switch {
		case err == nil:
			return
		case errors.Is(err, ErrPermission):
			kept("the engine's user may not update the stream")
			return
		case !transient(err) || pause(ctx, attempt) != nil:
			kept(err.Error())
			return
		}
	}
}

// updateStream updates a stream to sc, and stops waiting for its answer
// as soon as the server refuses the connection's user the update, with
// ErrPermission.
func updateStream(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, sc jetstream.StreamConfig) (jetstream.Stream, error) {
	subject := "$JS.API.STREAM.UPDATE." + sc.Name
	var stream jetstream.Stream
	err := refusalsOf(nc).untilRefused(ctx, subject, nil, func(ctx context.Context) error {
		var err error
		stream, err = js.UpdateStream(ctx, sc)
		return err
	})
	return stream, err
}

func open(ctx context.Context, nc *nats.Conn, c Config, k kind) (*Bucket, error) {
	if err := c.Check("config"); err != nil {
		return nil, err
	}
	c.Replicas = c.replicas()
	ctx, cancel := callContext(ctx)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream bucket %s: %w", c.Bucket, err)
	}
	stream, err := openStream(ctx, nc, js, c.Bucket, k)
	if err != nil {
		return nil, err
	}
	sc := stream.CachedInfo().Config
	if err := k.check(c, sc); err != nil {
		return nil, err
	}
	if k.fenced {
		if sc, err = allowAtomic(ctx, nc, js, c.Bucket, k, sc); err != nil {
			return nil, err
		}
	}
	if k.adjust != nil {
		k.adjust(ctx, c.logger(), nc, js, sc)
	}
	b := &Bucket{
		nc: nc, refusals: refusalsOf(nc), js: js, stream: stream, name: c.Bucket, prefix: k.prefix,
		api: "$JS.API.STREAM.MSG.GET." + k.stream, streamName: k.stream,
		direct: "$JS.API.DIRECT.GET." + k.stream, kind: k, replicas: c.Replicas,
		fenced: k.fenced, attempt: attemptTimeout,
	}
	if k.fenced && c.Replicas > 1 {
		b.idle = make(chan int, fenceShards)
		for i := range fenceShards {
			b.idle <- i
		}
	}
	return b, nil
}

// openStream returns the bucket's stream, creating the bucket when it is
// missing. Two engines may create it at once; the loser opens the winner's.
func openStream(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, bucket string, k kind) (jetstream.Stream, error) {
	for attempt := 0; ; attempt++ {
		// A request the stream's leader should answer goes unanswered
		// while the stream elects one: each attempt has its own deadline.
		actx, cancel := context.WithTimeout(ctx, 2*attemptTimeout)
		var stream jetstream.Stream
		err := refusalsOf(nc).untilRefused(actx, "", k.owns, func(actx context.Context) error {
			var err error
			stream, err = js.Stream(actx, k.stream)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				if err = k.create(actx, js); err == nil {
					stream, err = js.Stream(actx, k.stream)
				}
			}
			return err
		})
		cancel()
		if err == nil {
			return stream, nil
		}
		if errors.Is(err, ErrPermission) {
			return nil, fmt.Errorf("jetstream bucket %s: %w", bucket, err)
		}
		// A loaded cluster may count a peer offline for a moment: placing
		// a replicated stream then fails until it counts it back.
		if !transient(err) && !isAPICode(err, 10005) || ctx.Err() != nil {
			return nil, fmt.Errorf("jetstream bucket %s: %w", bucket, err)
		}
		if perr := pause(ctx, attempt); perr != nil {
			return nil, fmt.Errorf("jetstream bucket %s: %w", bucket, err)
		}
	}
}

// ObjectChunkSize is the most bytes of an object one message of an object
// store bucket carries, the chunk size of nats.go's object stores.
const ObjectChunkSize = 128 << 10

// ObjectMessageRoom is the least largest message an object store bucket
// needs: a chunk, or the description of an object whose key is the
// longest, every byte escaped in JSON, and their headers.
const ObjectMessageRoom = ObjectChunkSize + 8<<10

// badSetting names the bucket and the setting it has that the adapter
// cannot work with.
func badSetting(c Config, setting string, has, want any) error {
	return fmt.Errorf("jetstream bucket %s has %s %v, the configuration needs %v; change the configuration or the bucket (nothing was changed): %w",
		c.Bucket, setting, has, want, ports.ErrInvalidArgument)
}

// checkObjects refuses an object store bucket made by someone else with
// another replica count, or with a TTL or limits that would drop stored
// chunks: an object's chunks share one subject, so a limit of messages per
// subject keeps only its last chunk, and a size or count limit that
// discards old messages drops the chunks of objects already stored. Either
// leaves descriptions whose content is gone. Limits that refuse new writes
// (the object store's own discard policy) fail the write instead. A stream
// without rollups (as one that denies purges must be) fails every Put, and
// so does one whose largest message cannot hold a chunk and its headers.
func checkObjects(c Config, sc jetstream.StreamConfig) error {
	switch {
	case sc.MaxMsgSize > 0 && sc.MaxMsgSize < ObjectMessageRoom:
		return badSetting(c, "a largest message (max_msg_size) of", sc.MaxMsgSize, fmt.Sprintf("at least %d bytes (a chunk of %d and its headers)", ObjectMessageRoom, ObjectChunkSize))
	case sc.Replicas != c.Replicas:
		return badSetting(c, "replicas", sc.Replicas, c.Replicas)
	case sc.MaxAge != 0:
		return badSetting(c, "a bucket TTL (max_age)", sc.MaxAge, "none")
	case sc.MaxMsgsPerSubject > 0:
		return badSetting(c, "messages per subject", sc.MaxMsgsPerSubject, "no limit")
	case sc.Discard != jetstream.DiscardNew && (sc.MaxBytes > 0 || sc.MaxMsgs > 0):
		return badSetting(c, "discard policy", sc.Discard, jetstream.DiscardNew)
	case !sc.AllowRollup:
		// A Put makes its object visible by a rollup of the description.
		return badSetting(c, "rollups (allow_rollup_hdrs)", false, true)
	}
	return nil
}

// checkKeyValue refuses a key-value bucket made by someone else with
// settings the adapters would silently misuse.
func checkKeyValue(c Config, sc jetstream.StreamConfig) error {
	bad := func(setting string, has, want any) error { return badSetting(c, setting, has, want) }
	switch {
	case sc.Replicas != c.Replicas:
		return bad("replicas", sc.Replicas, c.Replicas)
	case sc.MaxMsgsPerSubject != 1:
		return bad("history", sc.MaxMsgsPerSubject, 1)
	case !sc.AllowMsgTTL:
		return bad("per-message TTL (allow_msg_ttl)", false, true)
	case sc.MaxAge != 0:
		return bad("a bucket TTL (max_age)", sc.MaxAge, "none")
	case !sc.AllowDirect:
		return bad("direct get (allow_direct)", false, true)
	case sc.Discard != jetstream.DiscardNew && (sc.MaxBytes > 0 || sc.MaxMsgs > 0):
		return bad("discard policy", sc.Discard, jetstream.DiscardNew)
	}
	return nil
}

// callContext gives a call without a deadline the default one.
func callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultCallTimeout)
}

// transient is an error that a moment later may not be: no responder while
// a stream elects a leader, a request that timed out, a reconnecting
// connection (also a publish it refused while away, having no reconnect
// buffer), a conditional write refused while another write of its key is
// in flight (inFlight), an atomic batch the stream got only part of or
// had no room for (incompleteBatch), or one refused since the stream's
// atomic batches were turned off (atomicDisabled; publish turns them on
// again before it resends).
func transient(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrReconnectBufExceeded) ||
		errors.Is(err, context.DeadlineExceeded) ||
		isAPICode(err, 10008) || // JetStream temporarily unavailable
		inFlight(err) || resentInFlight(err) || incompleteBatch(err) || atomicDisabled(err)
}

// unstored reports whether a sending of a write that failed with err
// surely stored nothing: no server had a subscriber for it, so no stream
// leader took it (no responders: while a stream elects a leader, or when
// it does not exist); the connection refused to send it (over the
// broker's max_payload, or while reconnecting, having no buffer for it);
// or the stream refused it before storing it for a cause a later sending
// may not meet (another write of the key in flight, the key's revision
// moved, larger than its largest message, an atomic batch it got only
// part of or had no room for, or took none of with atomic batches off). A sending that timed out, was
// cut off, or was refused in a way that may follow its storing (a store
// failure, a resend that met its first attempt in flight) may have been
// stored. A refusal no later sending can pass (a sealed stream, a
// per-message TTL it does not take) is not counted: "send it again"
// would have callers send it again until their deadlines, for nothing;
// such a write stays a 500, naming the refusal in the log.
func unstored(err error) bool {
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrReconnectBufExceeded) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant,
		jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return true
	}
	return incompleteBatch(err) || atomicDisabled(err)
}

// refusedForGood matches a refusal that stored nothing and that no later
// sending can pass: a sealed stream (10109), a per-message TTL the stream
// does not take (10165, 10166), a publish the server refused to the
// connection's user (ErrPermission), which it sent to no stream. It is not
// unstored, which would call the write not done, to be sent again; it is
// named as it came, and says nothing of an earlier sending of the write.
func refusedForGood(err error) bool {
	return isAPICode(err, 10109) || isAPICode(err, 10165) || isAPICode(err, 10166) || errors.Is(err, ErrPermission)
}

// resentInFlight matches 10158: a write sent again under its message id
// met its first attempt, still proposed on a replicated stream. Once that
// attempt is stored, the stream answers the next resend as its duplicate,
// with its revision; until then the outcome is not known.
func resentInFlight(err error) bool {
	return isAPICode(err, 10158)
}

// isFull matches a write refused for want of room: the stream's own limit
// of bytes or messages, with its discard policy refusing new ones (10077,
// a store failure whose text names the limit), or the storage the account
// or the server has for JetStream (10002, 10023, 10028, 10047).
func isFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10002, 10023, 10028, 10047:
		return true
	case 10077:
		return strings.Contains(apiErr.Description, "maximum bytes exceeded") ||
			strings.Contains(apiErr.Description, "maximum messages exceeded")
	}
	return false
}

func isAPICode(err error, code jetstream.ErrorCode) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == code
}

// pause waits before attempt+1, growing from 25 ms to half a second.
func pause(ctx context.Context, attempt int) error {
	d := min(25*time.Millisecond<<min(attempt, 5), 500*time.Millisecond)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// Settle waits before round+1 of a conditional write that lost a race: the
// write that won may be a removal at expiry that the leader has not yet
// applied everywhere it checks, so an immediate retry could lose again.
func Settle(ctx context.Context, round int) error { return pause(ctx, round) }

// retry runs op until it succeeds, fails for good, or ctx ends. Each
// attempt has its own deadline within ctx, so one lost reply does not use
// up the call. op publishes to subject; one the server refused to the
// connection's user fails at once, with ErrPermission, as soon as the
// refusal reaches the connection (untilRefused). The server tells the
// connection, not the request, which would otherwise wait out its attempt
// (3 s) and be retried as if the stream were electing a leader. A write
// (w) fails so only when the refusal is certainly its own
// (untilWriteRefused).
func (b *Bucket) retry(ctx context.Context, subject string, w writing, op func(ctx context.Context) error) error {
	ctx, cancel := callContext(ctx)
	defer cancel()
	// A refusal of another subject is no answer to op: cut short on it, a
	// write that may yet be stored would be told refused.
	for attempt := 0; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, b.attempt)
		var err error
		if w == reads {
			err = b.refusals.untilRefused(actx, subject, nil, op)
		} else {
			err = b.refusals.untilWriteRefused(actx, subject, w == writesBatch, op)
		}
		acancel()
		if err == nil || !transient(err) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		if perr := pause(ctx, attempt); perr != nil {
			return err
		}
		if left, ok := ctx.Deadline(); ok && time.Until(left) < resendRoom {
			return err
		}
	}
}

// writing tells retry what op does with its subject.
type writing int

const (
	// reads: op reads, or asks the stream's API, and has no outcome to
	// get wrong when another request's refusal fails it.
	reads writing = iota
	// writes: op publishes one message to the subject.
	writes
	// writesBatch: op publishes an atomic batch, two messages, to it.
	writesBatch
)

// resendRoom is the least time a call must have left for a resend: one
// begun with less would likely be cut off before its answer came, and a
// write cut off so may have been stored, where every sending before it
// may have told that nothing was.
const resendRoom = 250 * time.Millisecond

// Entry is the last message of a key.
type Entry struct {
	// Revision is the message's stream sequence, also for a deletion
	// marker or an expired value; 0 when the key has no message.
	Revision uint64
	// Live reports a value that has not expired.
	Live  bool
	Value []byte
	// Time is when the broker stored the message.
	Time time.Time
	// ExpiresAt is zero for a value without a TTL.
	ExpiresAt time.Time
	// id is the writer's message id, to recognise a write of ours whose
	// reply was lost.
	id string
}

// Lingering reports a value past its expiry that the broker has not yet
// removed. The broker removes it on its own clock, in whole seconds, and
// on a replicated stream its removal (and the marker it leaves) can be
// ordered after a write made over the value meanwhile: a write
// conditioned on a lingering value may be hidden by that marker.
func (e Entry) Lingering() bool { return e.Revision != 0 && !e.Live && !e.ExpiresAt.IsZero() }

// Subject is the subject of a key token.
func (b *Bucket) Subject(token string) string { return b.prefix + token }

// Name is the bucket's name.
func (b *Bucket) Name() string { return b.name }

// msgGetResponse is the leader's answer to a message get.
type msgGetResponse struct {
	Message *rawMsg             `json:"message"`
	Error   *jetstream.APIError `json:"error"`
}

// rawMsg is a message as the leader's message get returns it.
type rawMsg struct {
	Subject  string    `json:"subject"`
	Sequence uint64    `json:"seq"`
	Header   []byte    `json:"hdrs"`
	Data     []byte    `json:"data"`
	Time     time.Time `json:"time"`
}

// get asks the stream's leader for one message; nil when there is none.
func (b *Bucket) get(ctx context.Context, req any) (*rawMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var out *rawMsg
	err = b.retry(ctx, b.api, reads, func(ctx context.Context) error {
		msg, err := b.nc.RequestWithContext(ctx, b.api, body)
		if err != nil {
			return err
		}
		var resp msgGetResponse
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return fmt.Errorf("read the answer of bucket %s: %w", b.name, err)
		}
		if resp.Error != nil {
			if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
				out = nil
				return nil
			}
			return resp.Error
		}
		if resp.Message == nil {
			return fmt.Errorf("bucket %s answered a read with no message", b.name)
		}
		out = resp.Message
		return nil
	})
	return out, err
}

// Last reads the key's last message from the stream's leader.
func (b *Bucket) Last(ctx context.Context, token string) (Entry, error) {
	m, err := b.get(ctx, map[string]string{"last_by_subj": b.Subject(token)})
	if err == nil && m == nil {
		return Entry{}, nil
	}
	var e Entry
	if err == nil {
		var h nats.Header
		if len(m.Header) > 0 {
			h, err = nats.DecodeHeadersMsg(m.Header)
		}
		if err == nil {
			e, err = entry(m.Sequence, h, m.Data, m.Time)
		}
	}
	if err != nil {
		return Entry{}, fmt.Errorf("read %.60s from bucket %s: %w", token, b.name, err)
	}
	return e, nil
}

// Msg is a message of a key read by Next or LastMsg; Seq 0 means none.
type Msg struct {
	Seq    uint64
	Header nats.Header
	Data   []byte
}

// Next reads, from the stream's leader, the first message of the key at or
// after stream sequence seq.
func (b *Bucket) Next(ctx context.Context, token string, seq uint64) (Msg, error) {
	return b.msg(ctx, token, map[string]any{"seq": seq, "next_by_subj": b.Subject(token)})
}

// LastMsg reads, from the stream's leader, the last message of the key.
func (b *Bucket) LastMsg(ctx context.Context, token string) (Msg, error) {
	return b.msg(ctx, token, map[string]any{"last_by_subj": b.Subject(token)})
}

func (b *Bucket) msg(ctx context.Context, token string, req map[string]any) (Msg, error) {
	m, err := b.get(ctx, req)
	if err == nil && m == nil {
		return Msg{}, nil
	}
	var h nats.Header
	if err == nil && len(m.Header) > 0 {
		h, err = nats.DecodeHeadersMsg(m.Header)
	}
	if err != nil {
		return Msg{}, fmt.Errorf("read %s (%v) from bucket %s: %w", token, req["seq"], b.name, err)
	}
	return Msg{Seq: m.Sequence, Header: h, Data: m.Data}, nil
}

// entry reads a stored message.
func entry(seq uint64, h nats.Header, data []byte, stored time.Time) (Entry, error) {
	e := Entry{Revision: seq, Time: stored}
	e.id = h.Get(jetstream.MsgIDHeader)
	switch h.Get(headerOperation) {
	case "DEL", "PURGE":
		return e, nil
	}
	if h.Get(headerMarkerReason) != "" {
		return e, nil // the broker's marker of a value it removed at expiry
	}
	ttl, err := expiresIn(h)
	if err != nil {
		return Entry{}, fmt.Errorf("message %d: %w", seq, err)
	}
	if ttl > 0 {
		e.ExpiresAt = stored.Add(ttl)
	}
	e.Live = e.ExpiresAt.IsZero() || time.Now().Before(e.ExpiresAt)
	if e.Live {
		e.Value = data
		if e.Value == nil {
			e.Value = []byte{}
		}
	}
	return e, nil
}

// expiresIn is the TTL a message was written with: ours to the nanosecond,
// or the broker's whole seconds for a message another client wrote.
func expiresIn(h nats.Header) (time.Duration, error) {
	if s := h.Get(headerExpiresIn); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("unreadable %s header %q", headerExpiresIn, s)
		}
		return d, nil
	}
	s := h.Get(headerTTL)
	if s == "" || strings.EqualFold(s, "never") {
		return 0, nil
	}
	if secs, err := strconv.ParseInt(s, 10, 64); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d, nil
	}
	return 0, fmt.Errorf("unreadable %s header %q", headerTTL, s)
}

// brokerSeconds is ttl in whole seconds, rounded up, as the broker keeps it.
func brokerSeconds(ttl time.Duration) string {
	secs := int64(math.Ceil(ttl.Seconds()))
	return strconv.FormatInt(max(secs, 1), 10)
}

// Put writes value under the key token with a TTL (0: none). With expect,
// the write happens only if the key's last revision is *expect (0: the key
// has no message), and fails with ErrConflict otherwise. It returns the new
// revision.
//
// On a fenced bucket a write under a fencing token is fenced (fence.go).
func (b *Bucket) Put(ctx context.Context, token string, value []byte, ttl time.Duration, expect *uint64) (uint64, error) {
	return b.put(ctx, token, value, ttl, expect, b.write)
}

// send is how a write goes to the stream: write, fenced where the bucket
// is, or publish, never fenced.
type send func(ctx context.Context, token string, m *nats.Msg, expect *uint64) (uint64, error)

// unfenced publishes m, never fenced: a scan's barrier is part of a read,
// and an object's chunks are read only once a fenced write names them.
func (b *Bucket) unfenced(ctx context.Context, token string, m *nats.Msg, expect *uint64) (uint64, error) {
	return b.publish(ctx, token, m, expect, nil)
}

func (b *Bucket) put(ctx context.Context, token string, value []byte, ttl time.Duration, expect *uint64, via send) (uint64, error) {
	m := nats.NewMsg(b.Subject(token))
	m.Data = value
	if ttl > 0 {
		m.Header.Set(headerTTL, brokerSeconds(ttl))
		m.Header.Set(headerExpiresIn, ttl.String())
	}
	rev, err := via(ctx, token, m, expect)
	if err != nil {
		return 0, fmt.Errorf("write %s to bucket %s: %w", token, b.name, err)
	}
	return rev, nil
}

// Remove writes a deletion marker if the key's last revision is expect,
// and fails with ErrConflict otherwise.
func (b *Bucket) Remove(ctx context.Context, token string, expect uint64) (uint64, error) {
	m := nats.NewMsg(b.Subject(token))
	m.Header.Set(headerOperation, "DEL")
	m.Header.Set(headerTTL, brokerSeconds(markerTTL))
	rev, err := b.write(ctx, token, m, &expect)
	if err != nil {
		return 0, fmt.Errorf("delete %s from bucket %s: %w", token, b.name, err)
	}
	return rev, nil
}

// Publish sends m to the key token, conditioned like Put when expect is
// not nil, and fenced like Put.
func (b *Bucket) Publish(ctx context.Context, token string, m *nats.Msg, expect *uint64) (uint64, error) {
	return b.publishVia(ctx, token, m, expect, b.write)
}

// PublishUnfenced is Publish never fenced, for a write no read reaches
// until a fenced one names it (an object's chunks).
func (b *Bucket) PublishUnfenced(ctx context.Context, token string, m *nats.Msg, expect *uint64) (uint64, error) {
	return b.publishVia(ctx, token, m, expect, b.unfenced)
}

func (b *Bucket) publishVia(ctx context.Context, token string, m *nats.Msg, expect *uint64, via send) (uint64, error) {
	m.Subject = b.Subject(token)
	rev, err := via(ctx, token, m, expect)
	if err != nil {
		return 0, fmt.Errorf("write %s to bucket %s: %w", token, b.name, err)
	}
	return rev, nil
}

// publish sends m with a message id of its own, so a retry after a lost
// acknowledgement is not stored twice, and a conditional write whose
// acknowledgement was lost is recognised by its id (storedEarlier), or,
// a fenced one on a replicated bucket, reported of unknown outcome.
//
// It follows what became of each sending: a write that fails when none of
// them may have been stored (each found no stream, or was refused by one,
// unstored) fails as ports.ErrNotDone, which tells the caller it may send
// the write again; one whose last sending was refused for good
// (refusedForGood) fails naming that refusal. One sending unanswered, or
// answered in a way that does not say nothing was stored, keeps the
// outcome unknown, and the error then wraps none of the stream's answers.
//
// With fence, each sending is also conditioned on the fence record's
// revision (sendFenced). A batch refused since the stream's atomic
// batches were turned off is sent again once they are on again.
func (b *Bucket) publish(ctx context.Context, token string, m *nats.Msg, expect *uint64, fence *fenceCheck) (uint64, error) {
	id := nuid.Next()
	// Each sending is one request: nats.go's own resend after no
	// responders can find the call's end before it sends, and its error
	// then does not say that nothing was sent.
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(id), jetstream.WithRetryAttempts(0)}
	if expect != nil {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(*expect))
	}
	var (
		rev   uint64
		tries int
		// maybeStored: a sending may have been stored.
		maybeStored bool
		// atomicOff: the last sending found the stream without atomic
		// batches (atomicDisabled).
		atomicOff bool
	)
	call := ctx
	w := writes
	if fence != nil && expect != nil {
		w = writesBatch
	}
	err := b.retry(ctx, m.Subject, w, func(ctx context.Context) error {
		if atomicOff {
			if err := b.atomicAgain(call); err != nil {
				return err
			}
			atomicOff = false
		}
		tries++
		var ack *jetstream.PubAck
		var err error
		if fence != nil {
			ack, err = b.sendFenced(ctx, m, id, expect, *fence)
			atomicOff = atomicDisabled(err)
		} else {
			ack, err = b.js.PublishMsg(ctx, m, opts...)
		}
		if cause := context.Cause(ctx); err != nil && errors.Is(cause, ErrPermission) {
			// The server sent this sending to no stream.
			err = cause
		}
		if err == nil {
			rev = ack.Sequence
		} else if !unstored(err) && !refusedForGood(err) {
			maybeStored = true
		}
		return err
	})
	if err == nil {
		return rev, nil
	}
	// The connection refuses a message over the broker's max_payload; the
	// stream one over its own largest message (a bucket's max value size).
	if errors.Is(err, nats.ErrMaxPayload) || isAPICode(err, jetstream.JSErrCodeStreamMessageExceedsMaximum) {
		return 0, fmt.Errorf("%d bytes: %w: %w", len(m.Data), ports.ErrTooLarge, err)
	}
	if isFull(err) {
		return b.fullOnResend(ctx, token, id, tries, err)
	}
	if !isConflict(err) {
		if !maybeStored && refusedForGood(err) {
			return 0, err
		}
		if !maybeStored {
			return 0, fmt.Errorf("the stream took none of its %d sendings: %w: %w", tries, ports.ErrNotDone, err)
		}
		// The stream's answer to the last sending (temporarily
		// unavailable, sealed) says nothing of an earlier one that may
		// have been stored, and wrapped it reads as a refusal that stored
		// nothing: an object Put then purged the chunks of a description
		// that may be stored. It goes as text; what ended the call (a
		// deadline, a cancellation) stays the caller's to see.
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return 0, fmt.Errorf("whether the write was stored is unknown: one of its %d sendings may have been stored, and the call ended: %w", tries, err)
		}
		return 0, fmt.Errorf("whether the write was stored is unknown: one of its %d sendings may have been stored, and the last was answered with %v", tries, err)
	}
	if tries > 1 {
		// An earlier attempt may have been stored with its reply lost. A
		// replicated stream checks a single message's id first, and
		// answers a resend of a stored write as its duplicate: this resend
		// met an attempt stored meanwhile, or none, and the key's last
		// message tells. A single-replica stream checks the revision
		// first, so it refuses the resend of a stored write, and another
		// write may have come after ours since: the key's last message
		// need not be ours.
		if last, lerr := b.Last(ctx, token); lerr == nil && last.id == id {
			return last.Revision, nil
		}
		if b.replicas == 1 {
			return b.storedEarlier(ctx, m, id, err)
		}
		if fence != nil && expect != nil && maybeStored {
			// An atomic batch (sendFenced) is checked message by message,
			// the key's revision with the first, before a replicated
			// stream looks for the commit's id among those it stored: the
			// refusal says nothing of an earlier attempt. Asking, as
			// storedEarlier does, costs a round through the cluster that
			// racing writers cannot afford within their calls, so the
			// outcome stays unknown: neither a conflict nor, through
			// write, ErrFenced, which tell the caller nothing was written.
			return 0, fmt.Errorf("whether the write was stored is unknown: an attempt's reply was lost, and a resend, an atomic batch, was refused (%v), which a replicated stream decides before it looks for the earlier attempt", err)
		}
	}
	return 0, fmt.Errorf("%w: %w", ErrConflict, err)
}

// fullOnResend reads full, a refusal for want of room of the write under
// the message id id after tries attempts. The first attempt stored
// nothing. A resend may follow an attempt stored with its reply lost: a
// single-replica stream checks the message id first and answers such a
// resend as its duplicate, so its refusal means nothing was stored; a
// replicated one checks the account's and the server's storage first,
// which the stored attempt may itself have used up. The key's last
// message tells when it is the write's; otherwise the outcome is unknown,
// and the error wraps neither ports.ErrStorageFull nor the stream's
// refusal, since both tell the caller that nothing was written.
func (b *Bucket) fullOnResend(ctx context.Context, token, id string, tries int, full error) (uint64, error) {
	if tries > 1 {
		if last, err := b.Last(ctx, token); err == nil && last.id == id {
			return last.Revision, nil
		}
		if b.replicas > 1 {
			return 0, fmt.Errorf("whether the write was stored is unknown: an attempt's reply was lost, and a resend was refused for want of room (%v), which a replicated stream decides before it looks for the earlier attempt", full)
		}
	}
	return 0, fmt.Errorf("%w: %w", ports.ErrStorageFull, full)
}

// wrongLastMsgID is the stream's refusal of a write whose expected last
// message id is not the stream's.
const wrongLastMsgID jetstream.ErrorCode = 10070

// storedEarlier tells whether an earlier attempt of the write m, under the
// message id id, was stored, after a resend to a single-replica stream was
// refused on the revision (refused). It sends m once more under id, expecting a last message id
// no stream has: a stream that stored the write within its duplicate
// window (two minutes) answers the duplicate, with its revision, since it
// checks message ids first; one that did not refuses it on the last
// message id, and stores nothing. The write is then a conflict. An answer
// that says neither leaves the outcome unknown, which is reported as an
// error that is not a conflict and wraps none of the stream's answers:
// either tells the caller that nothing was written (the object store then
// purged the chunks of a description that may have been stored).
func (b *Bucket) storedEarlier(ctx context.Context, m *nats.Msg, id string, refused error) (uint64, error) {
	// The write's own expectations of the key's revision and of the
	// fence go: the stream would refuse on them before it looks at the
	// message id.
	probe := copyMsg(m)
	var ack *jetstream.PubAck
	err := b.retry(ctx, probe.Subject, writes, func(ctx context.Context) error {
		var err error
		ack, err = b.js.PublishMsg(ctx, probe, jetstream.WithMsgID(id), jetstream.WithExpectLastMsgID(nuid.Next()))
		return err
	})
	switch {
	case err == nil && ack.Duplicate:
		return ack.Sequence, nil
	case isAPICode(err, wrongLastMsgID):
		return 0, fmt.Errorf("%w: %w", ErrConflict, refused)
	case err == nil:
		// Not possible: the expected last message id is no stream's.
		return 0, fmt.Errorf("a resend to learn whether the write was stored was stored as a new write at revision %d (it was refused: %v)", ack.Sequence, refused)
	case errors.As(err, new(*jetstream.APIError)):
		return 0, fmt.Errorf("whether the write was stored is unknown: a resend was refused (%v), and asking again was answered with %v", refused, err)
	}
	// What ended the asking (the call's deadline, a lost connection) is
	// no answer of the stream, and stays the caller's to see.
	return 0, fmt.Errorf("whether the write was stored is unknown: a resend was refused (%v), and asking again failed: %w", refused, err)
}

// isConflict matches a refused revision: 10071, which the stream decides
// on the key's applied last revision.
func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) ||
		isAPICode(err, jetstream.JSErrCodeStreamWrongLastSequence)
}

// inFlight matches 10164: a replicated stream refused a conditional write
// because another write of the key was proposed and not yet applied. It
// compared no revisions, the other write may still fail, and until it is
// applied no read shows it: the refusal decides nothing, and the write is
// sent again under its message id until the stream stores it or refuses
// it on the key's applied revision (10071).
func inFlight(err error) bool {
	return isAPICode(err, jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Tokens lists the key tokens under filter (a subject filter relative to
// the bucket, ">" for every key) that have a message: values, expired
// values not yet removed and deletion markers alike. The stream's leader
// answers, so the list holds every acknowledged write.
func (b *Bucket) Tokens(ctx context.Context, filter string) ([]string, error) {
	var subjects map[string]uint64
	err := b.retry(ctx, "$JS.API.STREAM.INFO."+b.streamName, reads, func(ctx context.Context) error {
		info, err := b.stream.Info(ctx, jetstream.WithSubjectFilter(b.prefix+filter))
		if err != nil {
			return err
		}
		subjects = info.State.Subjects
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list keys of bucket %s: %w", b.name, err)
	}
	out := make([]string, 0, len(subjects))
	for s := range subjects {
		out = append(out, strings.TrimPrefix(s, b.prefix))
	}
	return out, nil
}

// scanBatch is how many messages a scan asks for at a time, and
// scanBytes how many bytes at most.
const (
	scanBatch = 1024
	scanBytes = 4 << 20
)

// Scan calls f with the last message of every key under filter, which
// ends in ".*", in no particular order. Deletion markers and expired
// values are passed with Live false.
//
// It reads in batches of direct gets, which any replica may answer, and a
// replica may lag the leader. So the scan first writes a barrier key under
// the filter ("<filter without *>=", which no encoded key or collection
// name can be): the leader orders it after every acknowledged write. Each
// batch goes on after the last message the one before returned, and the
// scan ends when a reply holds the barrier: the replica that sent it had
// applied every write acknowledged before the scan began, and sent every
// match from where the batch started.
//
// A purge of the keys under filter (a collection dropped meanwhile)
// removes the barrier and leaves no marker: a batch that finds nothing
// asks the leader for the barrier, and writes it again when it is gone.
//
// A key rewritten while the batches run has its new message past the
// barrier, where the last batch may stop short of it. So the scan then
// lists the keys under filter from the leader (Tokens) and reads the last
// message of each one the batches missed. On N keys that costs a list of
// N subject names, one request per 100,000, and one read per key missed.
func (b *Bucket) Scan(ctx context.Context, filter string, f func(token string, e Entry) error) error {
	ctx, cancel := callContext(ctx)
	defer cancel()
	if !strings.HasSuffix(filter, ".*") {
		return fmt.Errorf("scan bucket %s: filter %q does not end in .*", b.name, filter)
	}
	mark := strings.TrimSuffix(filter, "*") + "="
	upTo, err := b.put(ctx, mark, nil, time.Minute, nil, b.unfenced)
	if err != nil {
		return fmt.Errorf("scan bucket %s: %w", b.name, err)
	}
	// A key may come twice when a later batch comes from a replica that
	// applied a newer write: the last wins.
	last := map[string]Entry{}
	from := uint64(1)
	for done := false; !done; {
		msgs, err := b.batch(ctx, from, b.prefix+filter)
		if err != nil {
			return fmt.Errorf("scan bucket %s from sequence %d, waiting for %d: %w", b.name, from, upTo, err)
		}
		for _, m := range msgs {
			from = m.seq + 1
			token := strings.TrimPrefix(m.subject, b.prefix)
			if token == mark {
				done = done || m.seq >= upTo
				continue
			}
			e, err := entry(m.seq, m.header, m.data, m.time)
			if err != nil {
				return fmt.Errorf("scan bucket %s: %w", b.name, err)
			}
			last[token] = e
		}
		if len(msgs) == 0 && !done {
			// The replica that answered has not applied the barrier yet,
			// or a purge of the keys under filter (a dropped collection)
			// removed it, leaving no marker: then no reply will ever hold
			// it, and the scan writes it again.
			barrier, err := b.Last(ctx, mark)
			if err == nil && barrier.Revision < upTo {
				upTo, err = b.put(ctx, mark, nil, time.Minute, nil, b.unfenced)
			}
			if err == nil {
				err = pause(ctx, 0)
			}
			if err != nil {
				return fmt.Errorf("scan bucket %s from sequence %d, waiting for %d: %w", b.name, from, upTo, err)
			}
		}
	}
	// A key the batches missed was rewritten before they reached it, and
	// still has a message (a value or a deletion marker), so the leader
	// lists it now.
	tokens, err := b.Tokens(ctx, filter)
	if err != nil {
		return fmt.Errorf("scan bucket %s: %w", b.name, err)
	}
	for _, token := range tokens {
		if _, seen := last[token]; seen || token == mark {
			continue
		}
		e, err := b.Last(ctx, token)
		if err != nil {
			return fmt.Errorf("scan bucket %s: %w", b.name, err)
		}
		if e.Revision != 0 {
			last[token] = e
		}
	}
	for token, e := range last {
		if err := f(token, e); err != nil {
			return err
		}
	}
	return nil
}

// scanned is one message of a batch.
type scanned struct {
	seq     uint64
	subject string
	header  nats.Header
	data    []byte
	time    time.Time
}

// batch asks any replica for up to scanBatch messages matching filter from
// sequence from on, and collects the replies up to the end-of-batch mark.
// No match is an empty batch.
func (b *Bucket) batch(ctx context.Context, from uint64, filter string) ([]scanned, error) {
	body, _ := json.Marshal(map[string]any{"seq": from, "next_by_subj": filter, "batch": scanBatch, "max_bytes": scanBytes}) // plain values always encode
	var out []scanned
	err := b.retry(ctx, b.direct, reads, func(ctx context.Context) error {
		out = out[:0]
		inbox := b.nc.NewRespInbox()
		sub, err := b.nc.SubscribeSync(inbox)
		if err != nil {
			return err
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := b.nc.PublishRequest(b.direct, inbox, body); err != nil {
			return err
		}
		for {
			m, err := sub.NextMsgWithContext(ctx)
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					return nats.ErrTimeout
				}
				return err
			}
			if len(m.Data) == 0 && m.Header.Get("Status") != "" {
				switch m.Header.Get("Status") {
				case "204": // end of batch
					return nil
				case "404": // no match from here on
					return nil
				case "503":
					return nats.ErrNoResponders
				default:
					return fmt.Errorf("direct get answered %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
				}
			}
			seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			if err != nil {
				return fmt.Errorf("direct get reply without a sequence: %w", err)
			}
			at, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
			if err != nil {
				return fmt.Errorf("direct get reply %d without a time: %w", seq, err)
			}
			out = append(out, scanned{seq: seq, subject: m.Header.Get(jetstream.SubjectHeader), header: m.Header, data: m.Data, time: at})
		}
	})
	return out, err
}

// Purge removes every message of the keys under filter, leaving no
// markers.
func (b *Bucket) Purge(ctx context.Context, filter string) error {
	err := b.retry(ctx, "$JS.API.STREAM.PURGE."+b.streamName, reads, func(ctx context.Context) error {
		return b.stream.Purge(ctx, jetstream.WithPurgeSubject(b.prefix+filter))
	})
	if err != nil {
		return fmt.Errorf("purge %s from bucket %s: %w", filter, b.name, err)
	}
	return nil
}

// PurgeBelow removes the messages of the keys under filter whose revision
// is below rev, leaving no markers and every later write.
func (b *Bucket) PurgeBelow(ctx context.Context, filter string, rev uint64) error {
	err := b.retry(ctx, "$JS.API.STREAM.PURGE."+b.streamName, reads, func(ctx context.Context) error {
		return b.stream.Purge(ctx, jetstream.WithPurgeSubject(b.prefix+filter), jetstream.WithPurgeSequence(rev))
	})
	if err != nil {
		return fmt.Errorf("purge %s below revision %d from bucket %s: %w", filter, rev, b.name, err)
	}
	return nil
}
