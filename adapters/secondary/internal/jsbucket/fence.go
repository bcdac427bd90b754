package jsbucket

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/abi-engine/engine/ports"
)

// A fenced bucket keeps the newest fencing token a write carried in a
// fence, and refuses a write of an older term with ports.ErrFenced
// (ADR 0020). The fence is fenceShards records, the one message each of
// the key tokens "=fence.0", "=fence.1", ....
//
// A write under a token is conditioned on one record, read (or
// raised) at the write's token: a plain write by the header
// Nats-Expected-Last-Subject-Sequence-Subject naming the record, one
// publish; a write conditioned on its own key's revision too, as an
// atomic batch of two messages on its key, the first expecting the key's
// revision, the second the record's. The stream decides both when it
// stores the write, so a write of an older term that reaches it after a
// newer term raised the fence stores nothing.
//
// A term's first write through a bucket raises every record before it
// writes, so once a newer term has written, every record refuses the
// older ones, and a write may check any of them. Records, not one, since
// a replicated stream takes one conditional write on a subject at a time:
// it refuses (10164) a write expecting a subject's revision while another
// such write is proposed and not yet applied, and the write is sent again
// after a pause (transient). On one record every write of the bucket
// would wait for the one before. So on a replicated bucket a write takes
// a record no other write of this bucket holds (Bucket.idle), and waits
// here for one when all are taken; on a single-replica stream, which
// checks and stores a write in one step, the key picks it (shardOf).
//
// A term may be told to hold its raise back for a while (HoldRaise, ADR
// 0023): its writes are then conditioned on a record as it stands, so a
// newer term's raise still refuses them, and an older term's writes are
// not refused meanwhile. RaiseHeld ends such a hold early and raises.

// fenceShards is how many records the fence has.
const fenceShards = 16

// fenceShard is the key token of the fence's record i. "=" is in no token
// Encode makes, nor in a collection's name.
func fenceShard(i int) string { return "=fence." + strconv.Itoa(i) }

// shardOf is the fence's record that guards the key token.
func shardOf(token string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(token)) // a hash never fails
	return int(h.Sum32() % fenceShards)
}

// fenceRecord is a fence record as this bucket last saw it: the token it
// holds, and its revision; 0 when not seen.
type fenceRecord struct{ token, seq uint64 }

const (
	// headerFence is the token a fence record holds.
	headerFence = "Abi-Fence"
	// headerExpectedSubject names the subject whose last sequence
	// Nats-Expected-Last-Subject-Sequence is compared with.
	headerExpectedSubject = "Nats-Expected-Last-Subject-Sequence-Subject"
	headerBatchID         = "Nats-Batch-Id"
	headerBatchSeq        = "Nats-Batch-Sequence"
	headerBatchCommit     = "Nats-Batch-Commit"
	// fenceRounds bounds how often a write reads the fence again after
	// finding it moved.
	fenceRounds = 32
)

// atomicDisabled matches 10174: the stream has no atomic batches, and
// refused the batch, the first thing it checks of one, storing nothing.
// An older release beside this one turns them off when it writes back
// the whole stream config it read before they were on (dropMarkers).
func atomicDisabled(err error) bool { return isAPICode(err, 10174) }

// atomicAgain turns atomic batches on again on the bucket's stream, after
// a fenced write found them off (atomicDisabled). It writes back the
// config it reads from the stream's leader now, with the one setting
// changed.
func (b *Bucket) atomicAgain(ctx context.Context) error {
	info, err := b.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("jetstream bucket %s: read its stream to turn atomic batches on again: %w", b.name, err)
	}
	_, err = allowAtomic(ctx, b.nc, b.js, b.name, b.kind, info.Config)
	return err
}

// incompleteBatch matches 10176: the stream did not get, or did not take,
// a batch's first message (it is sent without a reply), and stored
// nothing of it; and 10210: the stream had as many atomic batches open
// as it takes (50 by default), and took none of this one.
func incompleteBatch(err error) bool { return isAPICode(err, 10176) || isAPICode(err, 10210) }

// fenceAt is the revision of the fence's record shard at the token t. A
// term's first call raises every record to t; after that the record this
// bucket last saw serves unless it is stale, else it is read from the
// stream's leader. A fence newer than t fails with ports.ErrFenced.
func (b *Bucket) fenceAt(ctx context.Context, t uint64, shard int, stale uint64) (uint64, error) {
	b.fenceMu.Lock()
	raised, r := b.fenceRaised, b.fence[shard]
	b.fenceMu.Unlock()
	switch {
	case raised > t:
		return 0, b.refuseOlder(t, raised)
	case r.token > t:
		return 0, b.refuseOlder(t, r.token)
	case raised < t && b.heldBack(t):
		return b.standing(ctx, t, shard, stale)
	case raised < t:
		if b.kind.fenceSubject != "" {
			// Another client may have written the stream's config back
			// since the store opened (nats.go's UpdateObjectStore lists only
			// chunks and descriptions), and the fence could not be raised:
			// every write of the new term would fail until the store opened
			// again. A term's first call restores the subject and atomic
			// batches first.
			if err := b.atomicAgain(ctx); err != nil {
				return 0, err
			}
		}
		for i := range fenceShards {
			if _, err := b.raise(ctx, t, i); err != nil {
				return 0, err
			}
		}
		b.fenceMu.Lock()
		b.fenceRaised = max(b.fenceRaised, t)
		r = b.fence[shard]
		b.fenceMu.Unlock()
	}
	if r.token == t && r.seq != 0 && r.seq != stale {
		return r.seq, nil
	}
	return b.raise(ctx, t, shard)
}

// raiseHold is a term whose first write raises no fence while held
// reports true.
type raiseHold struct {
	token uint64
	held  func() bool
}

// HoldRaise has the writes under token t, while held reports true, check
// the fence without raising it (ADR 0023): each is conditioned on a fence
// record as it stands, and refused with ports.ErrFenced when a newer term
// raised it, but a write of an older term still lands. The first write
// once held reports false raises the fence as a term's first write does.
// A later call replaces the hold of an earlier one.
func (b *Bucket) HoldRaise(t uint64, held func() bool) {
	b.fenceMu.Lock()
	defer b.fenceMu.Unlock()
	b.hold = raiseHold{token: t, held: held}
}

// RaiseHeld ends the hold of term t's raise, if one is told, and raises
// the fence to t at once, as the term's first write past its hold would.
// A fence a newer term raised fails it with ports.ErrFenced.
func (b *Bucket) RaiseHeld(ctx context.Context, t uint64) error {
	b.fenceMu.Lock()
	if b.hold.token == t {
		b.hold = raiseHold{}
	}
	b.fenceMu.Unlock()
	return b.Fence(ports.WithFencingToken(ctx, t))
}

// heldBack reports whether the raise of term t is held back now; once it
// no longer is, the hold is dropped.
func (b *Bucket) heldBack(t uint64) bool {
	b.fenceMu.Lock()
	h := b.hold
	b.fenceMu.Unlock()
	if h.token != t || h.held == nil {
		return false
	}
	if h.held() {
		return true
	}
	b.fenceMu.Lock()
	if b.hold.token == t {
		b.hold = raiseHold{}
	}
	b.fenceMu.Unlock()
	return false
}

// standing is the revision of the fence's record shard as it stands, for
// a write of term t whose raise is held back: the record this bucket last
// saw unless it is stale, else the one read from the stream's leader; 0
// when the record was never written, which the write then expects. A
// record newer than t fails with ports.ErrFenced.
func (b *Bucket) standing(ctx context.Context, t uint64, shard int, stale uint64) (uint64, error) {
	b.fenceMu.Lock()
	r := b.fence[shard]
	b.fenceMu.Unlock()
	switch {
	case r.token > t:
		return 0, b.refuseOlder(t, r.token)
	case r.seq != 0 && r.seq != stale:
		return r.seq, nil
	}
	token := fenceShard(shard)
	m, err := b.LastMsg(ctx, token)
	if err != nil {
		return 0, err
	}
	if m.Seq == 0 {
		return 0, nil
	}
	held, err := strconv.ParseUint(m.Header.Get(headerFence), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the fence record %s of bucket %s (revision %d) holds no token: %w", token, b.name, m.Seq, err)
	}
	b.remember(shard, held, m.Seq)
	if held > t {
		return 0, b.refuseOlder(t, held)
	}
	return m.Seq, nil
}

// raise reads the fence's record shard from the stream's leader and, when
// it holds a token older than t, raises it to t by a write conditioned on
// the record read. It returns the record's revision at t.
func (b *Bucket) raise(ctx context.Context, t uint64, shard int) (uint64, error) {
	token := fenceShard(shard)
	for round := range fenceRounds {
		if round > 0 {
			if err := Settle(ctx, round-1); err != nil {
				return 0, err
			}
		}
		m, err := b.LastMsg(ctx, token)
		if err != nil {
			return 0, err
		}
		var held uint64
		if m.Seq != 0 {
			if held, err = strconv.ParseUint(m.Header.Get(headerFence), 10, 64); err != nil {
				return 0, fmt.Errorf("the fence record %s of bucket %s (revision %d) holds no token: %w", token, b.name, m.Seq, err)
			}
			b.remember(shard, held, m.Seq)
		}
		switch {
		case m.Seq != 0 && held == t:
			return m.Seq, nil
		case held > t:
			return 0, b.refuseOlder(t, held)
		}
		msg := nats.NewMsg(b.Subject(token))
		msg.Header.Set(headerFence, strconv.FormatUint(t, 10))
		expect := m.Seq
		seq, err := b.publish(ctx, token, msg, &expect, nil)
		if err == nil {
			b.remember(shard, t, seq)
			return seq, nil
		}
		if !errors.Is(err, ErrConflict) {
			return 0, fmt.Errorf("raise the fence of bucket %s to %d: %w", b.name, t, err)
		}
	}
	return 0, fmt.Errorf("the fence of bucket %s moved %d times while raising it to %d: %w", b.name, fenceRounds, t, ports.ErrConflict)
}

// remember keeps the fence's record shard at seq holding token, unless a
// later one is known.
func (b *Bucket) remember(shard int, token, seq uint64) {
	b.fenceMu.Lock()
	defer b.fenceMu.Unlock()
	if seq > b.fence[shard].seq {
		b.fence[shard] = fenceRecord{token: token, seq: seq}
	}
}

// refuseOlder is the refusal of a write of term t by a bucket fenced at
// held.
func (b *Bucket) refuseOlder(t, held uint64) error {
	return fmt.Errorf("bucket %s is fenced at term %d, the write's term is %d: %w", b.name, held, t, ports.ErrFenced)
}

// Fence checks, and raises, the fence for the fencing token ctx carries,
// as a write would, without writing: a call of a newer term that writes
// nothing (a SetIfAbsent of a key that holds a value) fences the older
// terms all the same, and a call of an older term fails with
// ports.ErrFenced. Without a token, or on a bucket that is not fenced, it
// does nothing.
func (b *Bucket) Fence(ctx context.Context) error {
	t, ok := ports.FencingToken(ctx)
	if !b.fenced || !ok {
		return nil
	}
	ctx, cancel := callContext(ctx)
	defer cancel()
	_, err := b.fenceAt(ctx, t, 0, 0)
	return err
}

// write publishes m to the key token, conditioned like publish on expect
// and, on a fenced bucket under a fencing token, on the fence at that
// token. A conflict is told apart by reading the fence again: moved, the
// write is tried again on the new record; not moved, the key's own
// revision moved.
func (b *Bucket) write(ctx context.Context, token string, m *nats.Msg, expect *uint64) (uint64, error) {
	t, ok := ports.FencingToken(ctx)
	if !b.fenced || !ok {
		return b.publish(ctx, token, m, expect, nil)
	}
	ctx, cancel := callContext(ctx)
	defer cancel()
	shard := shardOf(token)
	if b.idle != nil {
		select {
		case shard = <-b.idle:
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for a fence record no other write holds: %w", ctx.Err())
		}
		defer func() { b.idle <- shard }()
	}
	var stale uint64
	for range fenceRounds {
		seq, err := b.fenceAt(ctx, t, shard, stale)
		if err != nil {
			return 0, err
		}
		rev, err := b.publish(ctx, token, m, expect, &fenceCheck{shard: shard, seq: seq})
		if !errors.Is(err, ErrConflict) {
			return rev, err
		}
		now, ferr := b.LastMsg(ctx, fenceShard(shard))
		if ferr != nil {
			return 0, fmt.Errorf("%w (then reading the fence failed: %w)", err, ferr)
		}
		if now.Seq == seq {
			return 0, err
		}
		stale = seq
	}
	return 0, fmt.Errorf("the fence moved %d times while writing: %w", fenceRounds, ports.ErrConflict)
}

// fenceCheck is the fence record a write expects: the record shard at
// revision seq.
type fenceCheck struct {
	shard int
	seq   uint64
}

// sendFenced sends one attempt of m, under the message id id, conditioned
// on the fence record fence and, with expect, on the key's revision:
// then as an atomic batch whose first message is a copy of the write that
// expects the key's revision, and whose second, the commit, is the write
// that expects the fence's. The key keeps one message, so the commit is
// what stays, and its sequence is the write's revision.
func (b *Bucket) sendFenced(ctx context.Context, m *nats.Msg, id string, expect *uint64, fence fenceCheck) (*jetstream.PubAck, error) {
	opts := []jetstream.PublishOpt{
		jetstream.WithMsgID(id), jetstream.WithRetryAttempts(0),
		jetstream.WithExpectLastSequenceForSubject(fence.seq, b.Subject(fenceShard(fence.shard))),
	}
	if expect == nil {
		return b.js.PublishMsg(ctx, copyMsg(m), opts...)
	}
	batch := nuid.Next()
	first := copyMsg(m)
	first.Header.Set(headerBatchID, batch)
	first.Header.Set(headerBatchSeq, "1")
	first.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(*expect, 10))
	if err := b.nc.PublishMsg(first); err != nil {
		// Neither message went to the server, and neither is refused.
		return nil, noneSent{err}
	}
	commit := copyMsg(m)
	// A batch may roll a subject up only at its first message on it (the
	// server refuses the batch otherwise): the first rolls the key up,
	// and the commit stays beside it.
	commit.Header.Del(jetstream.MsgRollup)
	commit.Header.Set(headerBatchID, batch)
	commit.Header.Set(headerBatchSeq, "2")
	commit.Header.Set(headerBatchCommit, "1")
	return b.js.PublishMsg(ctx, commit, opts...)
}

// copyMsg is m without the headers a sending adds.
func copyMsg(m *nats.Msg) *nats.Msg {
	c := nats.NewMsg(m.Subject)
	c.Data = m.Data
	for k, v := range m.Header {
		switch k {
		case jetstream.MsgIDHeader, jetstream.ExpectedLastSubjSeqHeader, headerExpectedSubject:
		default:
			c.Header[k] = v
		}
	}
	return c
}

// fenceable reports whether the stream sc has what a fenced bucket of
// kind k needs: atomic batches, and a subject for the fence's records.
func fenceable(k kind, sc jetstream.StreamConfig) bool {
	return sc.AllowAtomicPublish && (k.fenceSubject == "" || slices.Contains(sc.Subjects, k.fenceSubject))
}

// fenceNeeds names the settings fenceable checks, for an operator.
func fenceNeeds(k kind) string {
	if k.fenceSubject == "" {
		return "atomic batches (allow_atomic)"
	}
	return "atomic batches (allow_atomic) and the subject " + k.fenceSubject
}

// allowAtomic turns on atomic batches on a fenced bucket's stream made
// without them (before fences, or by another client), adds the fence's
// subject to a stream that lacks it (an object store's), and refuses a
// stream that still has no atomic batches after: a broker before
// nats-server 2.12 drops the setting, and would store a batch's messages
// one by one, the first of them unfenced.
func allowAtomic(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, bucket string, k kind, sc jetstream.StreamConfig) (jetstream.StreamConfig, error) {
	for attempt := 0; !fenceable(k, sc); attempt++ {
		want := sc
		want.AllowAtomicPublish = true
		if k.fenceSubject != "" && !slices.Contains(want.Subjects, k.fenceSubject) {
			want.Subjects = append(slices.Clone(want.Subjects), k.fenceSubject)
		}
		actx, cancel := context.WithTimeout(ctx, 2*attemptTimeout)
		info, err := updateStream(actx, nc, js, want)
		cancel()
		if err == nil {
			if !fenceable(k, info.CachedInfo().Config) {
				return sc, fmt.Errorf("jetstream bucket %s: the broker did not keep atomic batches (allow_atomic) on its stream, which a fenced store needs; nats-server 2.12 or later keeps them: %w",
					bucket, ports.ErrInvalidArgument)
			}
			return info.CachedInfo().Config, nil
		}
		if errors.Is(err, ErrPermission) {
			return sc, fmt.Errorf("jetstream bucket %s: a fenced store needs %s on its stream %s, which was made without them; allow the engine's user $JS.API.STREAM.UPDATE.%s (also used again when another client turns atomic batches off), or set them on the stream: %w",
				bucket, fenceNeeds(k), k.stream, k.stream, err)
		}
		if !transient(err) || ctx.Err() != nil {
			return sc, fmt.Errorf("jetstream bucket %s: turn on %s: %w", bucket, fenceNeeds(k), err)
		}
		if perr := pause(ctx, attempt); perr != nil {
			return sc, fmt.Errorf("jetstream bucket %s: turn on %s: %w", bucket, fenceNeeds(k), err)
		}
	}
	return sc, nil
}
