package enginecmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	lease "github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/natsconn"
	"github.com/abi-engine/engine/adapters/secondary/natsserver"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/internal/redact"
	"github.com/abi-engine/engine/internal/wire"
)

// statusTimeout bounds the status read, besides the wait for a renewal.
const statusTimeout = 30 * time.Second

// leaseStatus is what `engine status` reports.
type leaseStatus struct {
	Serving bool `json:"serving"`
	// Reason says why no engine serves; empty while one does.
	Reason string `json:"reason,omitempty"`
	// Holder is the lease value as the bucket stores it: the serving
	// engine, or the last one when it released the lease.
	Holder   json.RawMessage `json:"holder,omitempty"`
	Revision uint64          `json:"revision,omitempty"`
	// WrittenAt is when the broker stored the value, and SinceWrite how
	// long ago that was on this host's clock: the holder renews it every
	// quarter of a lease. They are for the reader; whether the holder
	// lives is judged without comparing the two hosts' clocks.
	WrittenAt  time.Time `json:"written_at,omitzero"`
	SinceWrite float64   `json:"since_write_seconds,omitempty"`
}

// statusCommand: `engine status` reads the lease holder straight from the
// bucket, without starting an engine and without creating the bucket.
func (c *command) statusCommand(args []string, stdout, stderr io.Writer) int {
	fs, cf := newFlags("status", "status [flags]", false, true)
	if _, code, ok := parseArgs(fs, cf, args, stderr, 0, 0); !ok {
		return code
	}
	cfg, err := cf.load()
	if err != nil {
		return fail(stderr, err)
	}
	// A signal ends the read, as it ends any command: status holds nothing,
	// so it reports the interruption and exits 1 at once. SIGHUP too, as
	// for the other commands. Before, it reported the read's error,
	// "context canceled", and SIGHUP killed it.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, stopSignals()...)
	defer signal.Stop(signals)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	type read struct {
		st  leaseStatus
		err error
	}
	done := make(chan read, 1)
	go func() {
		st, err := readStatus(ctx, cfg, cf.embedded())
		done <- read{st, err}
	}()
	var st leaseStatus
	select {
	case r := <-done:
		if r.err != nil {
			return fail(stderr, r.err)
		}
		st = r.st
	case sig := <-signals:
		cancel(interruptedBy(sig))
		return fail(stderr, context.Cause(ctx))
	}
	if cf.json() {
		err = writeJSON(stdout, st)
	} else {
		err = printStatus(stdout, st)
	}
	if err != nil {
		return fail(stderr, err)
	}
	return exitOK
}

// readStatus reads the lease within statusTimeout, and waits for a
// renewal for a lease besides.
func readStatus(parent context.Context, cfg *config.Config, embedded bool) (leaseStatus, error) {
	ctx, cancel := context.WithTimeout(parent, statusTimeout)
	defer cancel()
	// On embedded defaults a missing broker is the normal state of an
	// account where nothing runs; anywhere else it is an error.
	if embedded && !natsserver.Answers(cfg.NATS.URL, time.Second) {
		return leaseStatus{Reason: "no NATS server answers at " + redact.URLs(cfg.NATS.URL)}, nil
	}
	nc, err := natsconn.Connect(natsOptions(cfg, "abi-engine status"))
	if err != nil {
		return leaseStatus{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return leaseStatus{}, fmt.Errorf("lease bucket %s: %w", lease.DefaultBucket, err)
	}
	// KeyValue only looks the bucket up; lease.Open would create it.
	kv, err := js.KeyValue(ctx, lease.DefaultBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return leaseStatus{Reason: fmt.Sprintf("the lease bucket %s does not exist: no engine has served on this account", lease.DefaultBucket)}, nil
	}
	if err != nil {
		return leaseStatus{}, fmt.Errorf("lease bucket %s: %w", lease.DefaultBucket, err)
	}
	// Get answers "not found" for a key never written, deleted or purged.
	e, err := kv.Get(ctx, lease.Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return leaseStatus{Reason: "the lease is free"}, nil
	}
	if err != nil {
		return leaseStatus{}, fmt.Errorf("read lease %s.%s: %w", lease.DefaultBucket, lease.Key, err)
	}
	if st := describe(e); !st.Serving {
		return st, nil
	}
	// An unreleased record is also what a holder that was killed leaves
	// behind, for ever. The holder is alive only if it renews, every
	// quarter of its lease: the record is believed once a later write is
	// seen, and a whole lease without one, judged on this host's clock
	// alone as a contender judges it, means the holder is dead, or cut
	// off from NATS and fenced, and any engine would take over. The lease
	// is the longer of this configuration's and the one the holder's
	// record says it renews by, as a contender's is: judged by a shorter
	// one, a holder that renews now and then looked dead between two
	// renewals.
	holder := lease.DecodeHolder(e.Value())
	period, whose := cfg.Timing().Lease, "as lease_seconds here sets it"
	if holder.Lease > period {
		period, whose = holder.Lease, "the one its holder renews by"
	}
	watch, endWatch := context.WithTimeout(parent, statusTimeout+period)
	defer endWatch()
	next, err := nextWrite(watch, kv, e.Revision(), period)
	if err != nil {
		return leaseStatus{}, err
	}
	if next == nil {
		st := describe(e)
		st.Serving = false
		st.Reason = fmt.Sprintf("no renewal in %s (a lease, %s): %s stopped without releasing the lease, or cannot reach NATS and no longer serves",
			period, whose, holder)
		return st, nil
	}
	if next.Operation() != jetstream.KeyValuePut {
		return leaseStatus{Reason: "the lease is free"}, nil
	}
	st := describe(next)
	if !st.Serving {
		return st, nil
	}
	// A holder renews from its claim, but serves only once its start has
	// opened its services: the very first engine on an account holds the
	// new key a whole lease before it serves (ADR 0002). Until then no
	// engine answers on the engine's info subject, and the broker says so
	// at once. Any other outcome (an answer, a refusal, a permission the
	// caller lacks, a timeout) leaves the holder serving, as the lease says.
	_, err = nc.Request(wire.Subject(wire.ServiceEngine, wire.EngineInfo), []byte("{}"), 2*time.Second)
	if errors.Is(err, nats.ErrNoResponders) {
		st.Serving = false
		st.Reason = fmt.Sprintf("%s holds the lease but does not serve yet: it is still starting (the first engine on an account holds the new lease key for a whole lease before it serves)",
			lease.DecodeHolder(next.Value()))
	}
	return st, nil
}

// describe is what an entry of the lease key says by itself: its holder
// serves unless the record is a release.
func describe(e jetstream.KeyValueEntry) leaseStatus {
	h := lease.DecodeHolder(e.Value())
	st := leaseStatus{
		Serving: true, Revision: e.Revision(), WrittenAt: e.Created().UTC(),
		SinceWrite: time.Since(e.Created()).Round(100 * time.Millisecond).Seconds(),
	}
	if h.InstanceID != "" {
		st.Holder = lease.EncodeHolder(h)
	}
	if h.Released {
		st.Serving, st.Reason = false, fmt.Sprintf("engine %s on host %s released the lease", h.InstanceID, h.Host)
	}
	return st
}

// nextWrite watches the lease key for a write after revision rev, for up
// to wait, and returns it: a renewal, a release, a new holder or a
// deletion. It returns nil when none came.
func nextWrite(ctx context.Context, kv jetstream.KeyValue, rev uint64, wait time.Duration) (jetstream.KeyValueEntry, error) {
	// The watch lives on its own context, as the lease's does: cancelling
	// it closes the updates, which would read like the end of the initial
	// values.
	w, err := kv.Watch(context.Background(), lease.Key)
	if err != nil {
		return nil, fmt.Errorf("watch lease %s.%s: %w", lease.DefaultBucket, lease.Key, err)
	}
	defer func() { _ = w.Stop() }()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, nil
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("watch lease %s.%s: the watch closed", lease.DefaultBucket, lease.Key)
			}
			// nil ends the initial values; the revision read already, or
			// an older one, is no news.
			if e != nil && e.Revision() > rev {
				return e, nil
			}
		}
	}
}

func printStatus(w io.Writer, st leaseStatus) error {
	if !st.Serving {
		_, err := fmt.Fprintf(w, "no engine serves: %s\n", textSafe(st.Reason))
		if err != nil || st.Holder == nil {
			return err
		}
		_, err = fmt.Fprintf(w, "  revision:    %d\n  last write:  %s ago\n", st.Revision, time.Duration(st.SinceWrite*float64(time.Second)))
		return err
	}
	if st.Holder == nil {
		_, err := fmt.Fprintf(w, "an unknown engine holds the lease (its value could not be read)\n  revision:    %d\n  last write:  %s ago\n",
			st.Revision, time.Duration(st.SinceWrite*float64(time.Second)))
		return err
	}
	h := lease.DecodeHolder(st.Holder)
	rollout := h.RolloutID
	if rollout == "" {
		rollout = "none"
	}
	_, err := fmt.Fprintf(w, `engine %s serves
  host:        %s
  pid:         %d
  version:     %s
  rollout:     %s
  started:     %s
  revision:    %d
  last write:  %s ago
`, h.InstanceID, lineSafe(h.Host), h.PID, lineSafe(h.Version), lineSafe(rollout), h.StartedAt.UTC().Format(time.RFC3339), st.Revision,
		time.Duration(st.SinceWrite*float64(time.Second)))
	return err
}
