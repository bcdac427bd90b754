// Package jetstream keeps the ownership lease in a JetStream key-value
// bucket: the key "owner" of bucket ABI_ENGINE, written by create and by
// compare-and-swap on the key's revision.
package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/ports"
)

const (
	// DefaultBucket is the bucket every engine of an account shares.
	DefaultBucket = "ABI_ENGINE"
	// Key is the lease key inside the bucket.
	Key = "owner"
	// LongestKey keeps, beside Key, the longest lease any engine has
	// advertised (Advertise): a delete or purge of Key leaves it.
	LongestKey = "longest_lease"
)

var _ ports.Lease = (*Lease)(nil)

// Options choose the bucket. The zero value is the production bucket on one
// replica.
type Options struct {
	// Bucket defaults to DefaultBucket.
	Bucket string
	// Replicas is 1 or 3; 0 means 1. It applies when the bucket is
	// created; see RequireReplicas for one that exists.
	Replicas int
	// RequireReplicas refuses an existing bucket kept on fewer replicas
	// than Replicas, naming both counts, at Open and before every write
	// that makes the key anew or raises the longest lease (refuseSettings):
	// a serving engine configured for three must not run on one. Without it, such a bucket is used with a
	// warning. A bucket on more replicas than Replicas is used either way,
	// so a command run with the default configuration (one replica) works
	// against a bucket on three.
	RequireReplicas bool
	// Logger, when set, tells of a bucket used on another replica count.
	Logger *slog.Logger
}

// Lease is the lease on a JetStream bucket. Give it a connection of its own,
// so a busy service endpoint never delays a renewal.
type Lease struct {
	js      jetstream.JetStream
	legacy  nats.JetStreamContext // reads from the stream leader
	kv      jetstream.KeyValue
	config  jetstream.KeyValueConfig
	stream  string
	subject string
	longest string // the subject of LongestKey
	require bool   // Options.RequireReplicas
	log     *slog.Logger

	mu      sync.Mutex
	highest uint64 // the highest revision seen: a bucket made anew goes on from it
	updates int    // updates written, counted to check the settings every settingsEvery
}

// settingsEvery is how many updates pass between two checks of the
// bucket's settings (checkInPlace): a holder renews a quarter lease apart,
// so it checks them once a lease.
const settingsEvery = 4

// saw notes a revision the bucket showed.
func (l *Lease) saw(rev uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.highest = max(l.highest, rev)
}

// behind reports whether rev is below the highest revision seen: the
// stream went back.
func (l *Lease) behind(rev uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return rev < l.highest
}

// Open finds the bucket, or creates it with a history of one, refuses one
// whose values expire, or on fewer replicas than required (checkSettings),
// and compacts it if it never held a message (startAboveTerms).
func Open(ctx context.Context, nc *nats.Conn, opts Options) (*Lease, error) {
	if opts.Bucket == "" {
		opts.Bucket = DefaultBucket
	}
	switch opts.Replicas {
	case 0:
		opts.Replicas = 1
	case 1, 3:
	default:
		return nil, fmt.Errorf("%w: nats.engine.bucket_replicas is %d, want 1 or 3", domain.ErrInvalidConfig, opts.Replicas)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("lease bucket %s: %w", opts.Bucket, err)
	}
	legacy, err := nc.JetStream()
	if err != nil {
		return nil, fmt.Errorf("lease bucket %s: %w", opts.Bucket, err)
	}
	l := &Lease{
		js: js, legacy: legacy,
		config: jetstream.KeyValueConfig{
			Bucket:      opts.Bucket,
			Description: "abi-engine ownership lease",
			History:     1,
			Replicas:    opts.Replicas,
		},
		stream:  "KV_" + opts.Bucket,
		subject: "$KV." + opts.Bucket + "." + Key,
		longest: "$KV." + opts.Bucket + "." + LongestKey,
		require: opts.RequireReplicas,
		log:     opts.Logger,
	}
	kv, err := js.KeyValue(ctx, opts.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = l.create(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("lease bucket %s: %w", opts.Bucket, err)
	}
	if err := l.checkSettings(ctx, opts); err != nil {
		return nil, err
	}
	// This waits for the stream's leader too: a replicated stream just
	// made may have none yet, and the first write would find no one to
	// answer it. A new stream is compacted here, before any engine races
	// to create the key in it: on a replicated stream a purge that meets a
	// create in flight can leave the create unanswered until its deadline.
	// Create compacts too, for a stream made anew after Open.
	if err := l.startAboveTerms(ctx); err != nil {
		return nil, fmt.Errorf("lease bucket %s: %w", opts.Bucket, err)
	}
	l.kv = kv
	return l, nil
}

// checkSettings refuses a bucket, made by someone else, whose values
// expire (a bucket TTL, the stream's max_age). The server would drop a live
// holder's record whenever it is older than the TTL: with a TTL below a
// quarter lease, the usual gap between two renewals, between nearly every
// two. The holder then finds the key with no value, makes it again and
// holds it a lease before serving, each time, so it never serves; a
// standby or a new engine finds the lease free meanwhile and takes it from
// a holder that is alive. The lease frees itself only by its holder's
// silence, judged on the engines' clocks (ADR 0002), never by the
// server's.
//
// The replica count applies only when the bucket is made. A bucket kept on
// fewer replicas than the configured count (made by an engine configured
// otherwise, or by hand) loses the lease's record, and every engine's
// fencing, with one server where three were asked for: it is refused with
// opts.RequireReplicas, naming both counts, and used with a warning
// otherwise. One on more replicas is used, with a note. Nothing is changed
// in the bucket.
func (l *Lease) checkSettings(ctx context.Context, opts Options) error {
	st, err := l.leaderInfo(ctx)
	if err != nil {
		return fmt.Errorf("lease bucket %s: %w", l.config.Bucket, err)
	}
	if err := l.refuseSettings(st); err != nil {
		return err
	}
	has, want := max(st.CachedInfo().Config.Replicas, 1), l.config.Replicas
	switch {
	case has < want && opts.Logger != nil:
		opts.Logger.Warn("the lease bucket has fewer replicas than nats.engine.bucket_replicas; using it as it is",
			"bucket", l.config.Bucket, "replicas", has, "bucket_replicas", want)
	case has > want && opts.Logger != nil:
		opts.Logger.Info("the lease bucket has more replicas than nats.engine.bucket_replicas; using it as it is",
			"bucket", l.config.Bucket, "replicas", has, "bucket_replicas", want)
	}
	return nil
}

// refuseSettings refuses a stream whose values expire, or, with
// Options.RequireReplicas, one on fewer replicas than configured
// (checkSettings). Open checks them, and so does every write that makes
// the key anew or raises the longest lease (startAboveTerms), which a key
// found with no value, or a bucket made anew, leads to. A bucket deleted
// and made anew by hand while engines run would otherwise be used as it
// is: with a TTL the holder made its key again after every expiry, held it
// a lease each time, and never served; on one replica where three are
// required it kept the lease's record on one server. One edited in place
// is refused only once its key is made anew, as a TTL's expiry leads to.
func (l *Lease) refuseSettings(st jetstream.Stream) error {
	cfg := st.CachedInfo().Config
	if cfg.MaxAge != 0 {
		return fmt.Errorf("%w: lease bucket %s has a bucket TTL (max_age) of %v, the lease needs none: remove it, or delete the bucket for the engine to make it (nothing was changed)",
			domain.ErrInvalidConfig, l.config.Bucket, cfg.MaxAge)
	}
	if has, want := max(cfg.Replicas, 1), l.config.Replicas; has < want && l.require {
		return fmt.Errorf("%w: lease bucket %s has %d replica(s), nats.engine.bucket_replicas is %d: raise the bucket's (nats stream edit %s --replicas %d) or lower bucket_replicas to %d (nothing was changed)",
			domain.ErrInvalidConfig, l.config.Bucket, has, want, l.stream, want, has)
	}
	return nil
}

// create makes the bucket, or finds the one another engine made meanwhile.
func (l *Lease) create(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := l.js.CreateKeyValue(ctx, l.config)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = l.js.KeyValue(ctx, l.config.Bucket)
	}
	return kv, err
}

// recreateIfGone makes the bucket again when a call failed because it no
// longer exists, and reports whether it was gone. An engine whose bucket was
// deleted under it would otherwise stay fenced, and its standbys wait, for
// ever. The key in a new bucket has no value, over which the state machine
// holds a lease (the quarantine) before serving.
func (l *Lease) recreateIfGone(ctx context.Context, by overrun, err error) bool {
	if err == nil {
		return false
	}
	// The check and the create get a context of their own, which ends
	// with the call's overrun: a write to a bucket that is gone finds no
	// responder, and nats.go tries it again until the caller's context
	// has ended.
	ctx, cancel := by.context(ctx)
	defer cancel()
	if !errors.Is(err, nats.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		// So does a write during a leader election, or to a broker that
		// is cut off: only the stream's absence says which it was.
		if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, jetstream.ErrNoStreamResponse) &&
			!errors.Is(err, context.DeadlineExceeded) {
			return false
		}
		if _, serr := l.js.Stream(ctx, l.stream); !errors.Is(serr, jetstream.ErrStreamNotFound) {
			return false
		}
	}
	if _, cerr := l.create(ctx); cerr != nil {
		return false
	}
	// The new stream counts from 1; Create compacts it before the first
	// write (startAboveTerms).
	return true
}

// startAboveTerms compacts a stream that has never held a message, so its
// first write, and the fencing token it becomes, goes on above every term
// the stores may have seen. A stream counts from 1 when it is new, whoever
// made it: this engine at its first start, a holder or standby whose
// bucket was deleted, an operator with nats kv add. Its revisions would
// hand out terms the stores refuse as older, or the very term of an engine
// that served before the bucket went, beside a paused write that carries
// it. A stream that holds or held a message is left as it is, since a
// purge would wipe a live record. Two engines that find one empty stream
// both compact it; the later purge may remove the key the other just
// wrote, which that engine holds in its quarantine and loses at its next
// renewal. A stream whose count is behind the highest revision this
// engine saw has gone back (restored from a backup, or a broker that lost
// writes it had acknowledged, which its fsync interval allows): it is
// compacted as a new one is, or its next write would hand out a term
// again. Only the leader's count decides: while a replicated stream
// has no leader, each replica answers for itself, and one behind may
// report no message in a stream that holds the live record.
//
// A stream whose settings Open would refuse is refused here too
// (refuseSettings), before any write that makes the key anew or raises the
// longest lease.
func (l *Lease) startAboveTerms(ctx context.Context) error {
	st, err := l.leaderInfo(ctx)
	if err != nil {
		return err
	}
	if err := l.refuseSettings(st); err != nil {
		return err
	}
	l.mu.Lock()
	highest := l.highest
	l.mu.Unlock()
	if last := st.CachedInfo().State.LastSeq; last != 0 && last >= highest {
		return nil
	}
	next := firstRevisionAnew(highest, time.Now())
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(next)); err != nil {
		return fmt.Errorf("compact the new stream %s past revision %d (the engine's NATS user needs publish on $JS.API.STREAM.PURGE.%s): %w",
			l.stream, next, l.stream, err)
	}
	return nil
}

// leaderInfo reads the stream's state as its leader has it. It waits
// within ctx while the stream has no leader, or does not answer, as for a
// moment after it is made; a stream that is gone is reported at once.
func (l *Lease) leaderInfo(ctx context.Context) (jetstream.Stream, error) {
	wait := 20 * time.Millisecond
	for {
		st, err := l.js.Stream(ctx, l.stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, err
		}
		if err == nil {
			if info := st.CachedInfo(); info.Cluster == nil || info.Cluster.Leader != "" {
				return st, nil
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("the stream has no leader")
			}
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// firstRevisionAnew is the revision a bucket made anew at now starts from,
// given the highest revision this engine saw in the old one. That alone is
// not enough: another engine may have taken the lease in the old bucket a
// moment before it was deleted, in a write this engine never saw, and that
// term must not be handed out again. So the count also goes on from the
// wall clock in microseconds, which no bucket's revisions catch up with: a
// lease is renewed a few times a second, and each bucket made anew starts
// from the clock of its day. Only a clock behind the clock that made the old
// bucket anew, by more than that bucket's age, leaves the highest revision
// seen as the only guard.
func firstRevisionAnew(highest uint64, now time.Time) uint64 {
	return max(highest+1, uint64(max(now.UnixMicro(), 0)))
}

// overrun is the moment by which the checks of one call for a bucket that
// is gone, and its making anew, end: LeaseCallOverrun past the call's
// context's deadline, or past the call's start if that is later, which
// the liveness check counts on (domain.Lease). Every check of the call
// shares it, so Advertise, which makes the bucket anew and reads again
// each time it finds it gone, stays within it when the bucket is deleted
// again and again. The zero value, for a context without a deadline,
// gives each check LeaseCallOverrun of its own.
type overrun struct{ end time.Time }

// overrunOf is the overrun of a call on ctx that begins now.
func overrunOf(ctx context.Context) overrun {
	deadline, ok := ctx.Deadline()
	if !ok {
		return overrun{}
	}
	return overrun{end: later(deadline, time.Now()).Add(domain.LeaseCallOverrun)}
}

// context is the context of one check, within the call's overrun.
func (o overrun) context(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx = context.WithoutCancel(ctx)
	if o.end.IsZero() {
		return context.WithTimeout(ctx, domain.LeaseCallOverrun)
	}
	return context.WithDeadline(ctx, o.end)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// value is the JSON stored under the key.
type value struct {
	InstanceID string    `json:"instance_id"`
	Host       string    `json:"host"`
	PID        int       `json:"pid"`
	Version    string    `json:"version"`
	RolloutID  string    `json:"rollout_id"`
	StartedAt  time.Time `json:"started_at"`
	Released   bool      `json:"released,omitempty"`
	// Command marks the engine of one CLI command (domain.Holder.Command).
	Command bool `json:"command,omitempty"`
	// LeaseMS is the lease the holder renews by, in milliseconds.
	LeaseMS int64 `json:"lease_ms,omitempty"`
}

// EncodeHolder is the value written for h.
func EncodeHolder(h domain.Holder) []byte {
	b, _ := json.Marshal(value{ // a struct of plain fields always encodes
		InstanceID: h.InstanceID, Host: h.Host, PID: h.PID, Version: h.Version, RolloutID: h.RolloutID,
		StartedAt: h.StartedAt, Released: h.Released, Command: h.Command, LeaseMS: h.Lease.Milliseconds(),
	})
	return b
}

// DecodeHolder reads a stored value. A value it cannot read, written by
// something other than an engine, is an unknown holder: the lease is held,
// by nobody it can name. A lease outside the bounds an engine keeps to is
// read as none.
func DecodeHolder(b []byte) domain.Holder {
	var v value
	if err := json.Unmarshal(b, &v); err != nil || !domain.ValidInstanceID(v.InstanceID) {
		return domain.Holder{}
	}
	h := domain.Holder{
		InstanceID: v.InstanceID, Host: v.Host, PID: v.PID, Version: v.Version, RolloutID: v.RolloutID,
		StartedAt: v.StartedAt, Released: v.Released, Command: v.Command,
	}
	if v.LeaseMS > 0 && v.LeaseMS <= domain.MaxLease.Milliseconds() {
		h.Lease = time.Duration(v.LeaseMS) * time.Millisecond
	}
	return h
}

// Read returns the last message of the key: a value, or the marker of a
// deletion, which keeps its revision. It asks the stream's leader, not any
// replica: the holder decides from a read that the lease is lost, and a
// standby that it is released, so a replica behind must not answer.
func (l *Lease) Read(ctx context.Context) (domain.Record, error) {
	return l.read(ctx, overrunOf(ctx))
}

// read is Read within the overrun of the call it is part of.
func (l *Lease) read(ctx context.Context, by overrun) (domain.Record, error) {
	m, err := l.lastMessage(ctx, l.subject)
	if errors.Is(err, nats.ErrMsgNotFound) {
		return domain.Record{}, nil
	}
	if l.recreateIfGone(ctx, by, err) {
		return domain.Record{}, nil
	}
	if err != nil {
		return domain.Record{}, fmt.Errorf("read lease: %w", err)
	}
	if l.behind(m.Sequence) {
		// The stream has gone back behind a revision this engine saw: its
		// record says nothing of who holds the lease now, and a write over
		// it would hand out a term again. It reads as a key with no value;
		// Create compacts the stream past the highest revision first
		// (startAboveTerms), and the quarantine covers whoever served.
		return domain.Record{}, nil
	}
	l.saw(m.Sequence)
	switch m.Header.Get("KV-Operation") {
	case "DEL", "PURGE":
		return domain.Record{Revision: m.Sequence}, nil
	}
	return domain.Record{Holder: DecodeHolder(m.Data), Revision: m.Sequence, Present: true}, nil
}

// lastMessage reads the last message of a key's subject from the stream
// leader. For a moment after the bucket is created, or while a new leader
// is elected, no one may answer; that is retried briefly, within ctx.
func (l *Lease) lastMessage(ctx context.Context, subject string) (*nats.RawStreamMsg, error) {
	wait := 20 * time.Millisecond
	giveUp := time.Now().Add(2 * time.Second)
	for {
		m, err := l.legacy.GetLastMsg(l.stream, subject, nats.Context(ctx))
		retry := errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil
		if !retry || time.Now().After(giveUp) {
			return m, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// settled runs write, and runs it again, twice at most and within ctx, while
// its outcome is not settled: it found no stream to answer though the stream
// exists (a replicated stream just made, or electing a leader), or a
// replicated stream refused it because another write of the key was still
// in flight (10164), which may be a true conflict or may clear a moment
// later. A write that did land before its answer was lost then conflicts,
// which the state machine reads out.
func (l *Lease) settled(ctx context.Context, write func() (uint64, error)) (uint64, error) {
	rev, err := write()
	for try := 1; try <= 2 && unsettled(err); try++ {
		if _, serr := l.js.Stream(ctx, l.stream); serr != nil {
			return rev, err
		}
		select {
		case <-ctx.Done():
			return rev, err
		case <-time.After(time.Duration(try) * 50 * time.Millisecond):
		}
		rev, err = write()
	}
	return rev, err
}

func unsettled(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// Create writes h unless the key holds a value, in a stream compacted
// first if it never held a message (startAboveTerms).
func (l *Lease) Create(ctx context.Context, h domain.Holder) (uint64, error) {
	by := overrunOf(ctx)
	create := func() (uint64, error) {
		if err := l.startAboveTerms(ctx); err != nil {
			return 0, err
		}
		return l.createKey(ctx, EncodeHolder(h))
	}
	rev, err := l.settled(ctx, create)
	if l.recreateIfGone(ctx, by, err) {
		rev, err = create()
	}
	if isConflict(err) {
		return 0, fmt.Errorf("create lease: %w: %w", domain.ErrLeaseTaken, err)
	}
	if err != nil {
		return 0, fmt.Errorf("create lease: %w", err)
	}
	l.saw(rev)
	return rev, nil
}

// createKey writes v if the key holds no value: none at all, or the marker
// of a deletion, which it writes over by compare-and-swap on the marker's
// revision. The marker is read from the stream's leader. nats.go's Create
// reads it by a direct get, which any replica answers, and on a replicated
// stream one that has not yet applied the deletion shows the value it
// removed: the create then said the lease was taken while the key held no
// value, and the holder re-making a deleted key, or the contender taking
// it, failed for nothing.
func (l *Lease) createKey(ctx context.Context, v []byte) (uint64, error) {
	rev, err := l.kv.Update(ctx, Key, v, 0)
	if !isConflict(err) {
		return rev, err
	}
	m, rerr := l.lastMessage(ctx, l.subject)
	if rerr != nil {
		return 0, err
	}
	switch m.Header.Get("KV-Operation") {
	case "DEL", "PURGE":
		return l.kv.Update(ctx, Key, v, m.Sequence)
	}
	return 0, err
}

// longestValue is the JSON stored under LongestKey.
type longestValue struct {
	LeaseMS int64 `json:"lease_ms"`
}

// Advertise raises the lease kept under LongestKey to at least d, by
// compare-and-swap on that key's revision, and returns the longest kept
// then. The stream is compacted first if it never held a message
// (startAboveTerms): this key may be its first message, and the lease
// key's revisions, the fencing tokens, must still go on above the old
// ones. A value it cannot read, or one past the bounds an engine keeps to,
// counts as none and is written over.
func (l *Lease) Advertise(ctx context.Context, d time.Duration) (time.Duration, error) {
	by := overrunOf(ctx)
	var err error
	for try := 0; try < 4; try++ {
		// A read is all a takeover pays once the kept lease is as long as
		// its own. A write, which may be the first a stream made anew
		// holds, goes above the old terms first, as the key's own do.
		var kept time.Duration
		var rev uint64
		kept, rev, err = l.readLongest(ctx)
		if err == nil && kept >= d {
			return kept, nil
		}
		if err == nil {
			err = l.startAboveTerms(ctx)
		}
		if l.recreateIfGone(ctx, by, err) {
			continue
		}
		if err != nil {
			break
		}
		b, _ := json.Marshal(longestValue{LeaseMS: d.Milliseconds()}) // a struct of one integer always encodes
		var newRev uint64
		newRev, err = l.settled(ctx, func() (uint64, error) { return l.kv.Update(ctx, LongestKey, b, rev) })
		if err == nil {
			l.saw(newRev)
			return d, nil
		}
		if !isConflict(err) && !l.recreateIfGone(ctx, by, err) {
			break
		}
		// Another engine raised it, or made the bucket anew, meanwhile:
		// read it again.
	}
	return 0, fmt.Errorf("advertise lease: %w", err)
}

// Longest reads the lease kept under LongestKey, and writes nothing: 0
// when none is kept.
func (l *Lease) Longest(ctx context.Context) (time.Duration, error) {
	kept, _, err := l.readLongest(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the longest lease: %w", err)
	}
	return kept, nil
}

// readLongest reads the lease kept under LongestKey and the revision to
// write it at: 0 when the key was never written, a deletion's otherwise.
func (l *Lease) readLongest(ctx context.Context) (time.Duration, uint64, error) {
	m, err := l.lastMessage(ctx, l.longest)
	if errors.Is(err, nats.ErrMsgNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	l.saw(m.Sequence)
	switch m.Header.Get("KV-Operation") {
	case "DEL", "PURGE":
		return 0, m.Sequence, nil
	}
	var v longestValue
	if err := json.Unmarshal(m.Data, &v); err != nil || v.LeaseMS <= 0 || v.LeaseMS > domain.MaxLease.Milliseconds() {
		return 0, m.Sequence, nil
	}
	return time.Duration(v.LeaseMS) * time.Millisecond, m.Sequence, nil
}

// Update writes h if rev is the key's current revision.
func (l *Lease) Update(ctx context.Context, h domain.Holder, rev uint64) (uint64, error) {
	by := overrunOf(ctx)
	newRev, err := l.settled(ctx, func() (uint64, error) { return l.kv.Update(ctx, Key, EncodeHolder(h), rev) })
	if l.recreateIfGone(ctx, by, err) {
		return 0, fmt.Errorf("update lease at revision %d: the bucket was gone and is made anew: %w", rev, domain.ErrLeaseConflict)
	}
	if isConflict(err) {
		return 0, fmt.Errorf("update lease at revision %d: %w: %w", rev, domain.ErrLeaseConflict, err)
	}
	if err != nil {
		return 0, fmt.Errorf("update lease at revision %d: %w", rev, err)
	}
	l.saw(newRev)
	l.checkInPlace(ctx)
	return newRev, nil
}

// checkInPlace reads the bucket's settings every settingsEvery updates and
// logs, as an error, one that Open would refuse. A setting edited in place
// (nats kv edit --ttl, nats stream edit --replicas) is otherwise found only
// when the key is made anew: a TTL longer than the longest gap between
// two renewals that land (about half a lease while they succeed, without
// bound while they fail) never drops the holder's record, so it serves on
// unaware while longest_lease expires, a standby is refused the lease at
// the next handover, and a crash leaves no engine able to serve. The
// holder serves on meanwhile, since the lease stays sound while it renews;
// the error names the setting while there is time to change it. Any TTL
// is logged, whatever its length, since that gap has no fixed bound. A
// check that fails says nothing and waits for the next.
func (l *Lease) checkInPlace(ctx context.Context) {
	l.mu.Lock()
	l.updates++
	due := l.updates%settingsEvery == 0
	l.mu.Unlock()
	if !due || l.log == nil {
		return
	}
	st, err := l.js.Stream(ctx, l.stream)
	if err != nil {
		return
	}
	if err := l.refuseSettings(st); err != nil {
		l.log.Error("the lease bucket was changed to a setting the engine refuses; it serves on while it renews, but no other engine can take the lease over, at a handover or after a crash, until the setting is changed back",
			"err", err)
	}
}

// Delete removes the value if rev is the key's current revision.
func (l *Lease) Delete(ctx context.Context, rev uint64) error {
	_, err := l.settled(ctx, func() (uint64, error) { return 0, l.kv.Delete(ctx, Key, jetstream.LastRevision(rev)) })
	if isConflict(err) {
		return fmt.Errorf("delete lease at revision %d: %w: %w", rev, domain.ErrLeaseConflict, err)
	}
	if err != nil {
		return fmt.Errorf("delete lease at revision %d: %w", rev, err)
	}
	return nil
}

// WaitForChange watches the key, so a change is seen as soon as the broker
// delivers it. The watch is made and lives on ctx, so a caller that stops
// (a standby shutting down) is not held while the broker makes the watch's
// consumer. Cancelling a watch's context closes its updates: a closed watch
// whose context has ended reports the context's error.
func (l *Lease) WaitForChange(ctx context.Context, rev uint64, timeout time.Duration) (domain.Record, error) {
	by := overrunOf(ctx)
	w, err := l.kv.Watch(ctx, Key)
	if err != nil && ctx.Err() != nil {
		return domain.Record{}, ctx.Err()
	}
	if l.recreateIfGone(ctx, by, err) {
		return domain.Record{}, nil
	}
	if err != nil {
		return domain.Record{}, fmt.Errorf("watch lease: %w", err)
	}
	defer func() { _ = w.Stop() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	seen := false // whether the watch delivered any entry
	for {
		select {
		case <-ctx.Done():
			return domain.Record{}, ctx.Err()
		case <-timer.C:
			return l.read(ctx, by)
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return domain.Record{}, ctx.Err()
				}
				return domain.Record{}, errors.New("watch lease: the watch closed")
			}
			if e == nil {
				// The initial values are done. With none, the key may never
				// have been written, or (on a replicated bucket) the watch
				// started from a stale count: ask the stream before saying so.
				if !seen && rev != 0 {
					rec, err := l.read(ctx, by)
					if err != nil || rec.Revision != rev {
						return rec, err
					}
				}
				continue
			}
			seen = true
			// Every revision counts toward the highest seen, the ones
			// this call passes over included: a standby that only
			// watches learns a new holder's term here, and a bucket it
			// makes anew must go on above it.
			l.saw(e.Revision())
			if e.Revision() <= rev {
				// The revision we know, or an older one from a replica
				// behind: revisions only grow, so neither is a change.
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				return domain.Record{Revision: e.Revision()}, nil
			}
			return domain.Record{Holder: DecodeHolder(e.Value()), Revision: e.Revision(), Present: true}, nil
		}
	}
}

// isConflict matches a compare-and-swap refusal: 10071 on one replica, 10164
// on replicated buckets.
func isConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
