package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.uber.org/fx"

	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// ActivityCollection is the document collection of the activity log. On
// shared backends it is the history of every deploy. The document service
// refuses callers' writes to it: engines write it into their own store.
const ActivityCollection = wire.ActivityCollection

// Activity events: what happened to an engine's ownership.
const (
	EventAcquired = "acquired"
	EventTookOver = "took_over"
	EventFenced   = "fenced"
	EventRestored = "restored"
	EventLost     = "lost"
	EventReleased = "released"
	// EventNotReleased: an engine that held the lease stopped
	// without writing its release, so no successor takes the lease before
	// it has gone a lease without a renewal.
	EventNotReleased     = "not_released"
	EventStandbyStarted  = "standby_started"
	EventStandbyTimedOut = "standby_timed_out"
	// EventStandbyEnded: a standby gave up because an engine of its own
	// release took the lease.
	EventStandbyEnded = "standby_ended"
	// EventStandbyStopped: an engine stopped before it ever served.
	EventStandbyStopped = "standby_stopped"
)

// activityTime is RFC 3339 in UTC with every nanosecond digit, so entries
// sort by it as strings.
const activityTime = "2006-01-02T15:04:05.000000000Z07:00"

// ActivityEntry is one ownership event of one engine.
type ActivityEntry struct {
	InstanceID string `json:"instance_id"`
	Host       string `json:"host"`
	PID        int    `json:"pid"`
	Version    string `json:"version"`
	Rollout    string `json:"rollout"`
	Event      string `json:"event"`
	Detail     string `json:"detail"`
	// Revision is the lease's revision as the engine saw it.
	Revision uint64 `json:"revision"`
	// Time is when the engine observed the event, as activityTime.
	Time string `json:"time"`
}

// eventOf names a transition of the engine me; ok is false for one the
// log leaves out. waitedFor is the holder a standby waited for. Taking
// over is from a silent holder, or from the one a standby waited for once
// it released; a lease released earlier by an engine nobody waited for is
// acquired.
func eventOf(tr domain.Transition, me, waitedFor domain.Holder) (event, detail string, ok bool) {
	switch tr.To {
	case domain.StateServing:
		prev := tr.Previous
		switch {
		case tr.From == domain.StateFenced:
			return EventRestored, "a renewal succeeded again", true
		case prev.InstanceID != "" && !prev.Released:
			return EventTookOver, "took over from " + prev.String(), true
		case tr.From == domain.StateStandby && prev.InstanceID != "":
			return EventTookOver, "took over from " + prev.String() + ", which released the lease", true
		case tr.From == domain.StateStandby && waitedFor.InstanceID != "":
			return EventTookOver, "took over from " + waitedFor.String() + ", which released the lease", true
		case prev.InstanceID != "":
			return EventAcquired, "the lease was released by " + prev.String(), true
		}
		return EventAcquired, "the lease was free", true
	case domain.StateFenced:
		// The domain says why: renewals that failed, or a lease key
		// someone deleted, which the engine made anew and holds.
		if tr.Reason != "" {
			return EventFenced, tr.Reason + "; not serving", true
		}
		return EventFenced, "not serving", true
	case domain.StateLost:
		return EventLost, tr.Reason, true
	case domain.StateReleased:
		switch {
		case tr.HandedOver:
			return EventReleased, "released the lease on shutdown", true
		case tr.From == domain.StateServing || tr.From == domain.StateFenced,
			tr.Record.Holder.InstanceID == me.InstanceID && !tr.Record.Holder.Released:
			// The released record was not written: the lease was no
			// longer its own, the write failed, or it still held a key
			// it had made anew, which it may not hand over, whether or
			// not it had come to serve on it.
			return EventNotReleased, "stopped without writing its release; no engine takes the lease before it has gone a lease without a renewal", true
		}
		return EventStandbyStopped, "stopped before it served", true
	case domain.StateStandby:
		return EventStandbyStarted, "waiting for " + tr.Record.Holder.String(), true
	case domain.StateIdle:
		if tr.From != domain.StateStandby {
			return "", "", false
		}
		if strings.Contains(tr.Reason, domain.ErrStandbyTimedOut.Error()) {
			return EventStandbyTimedOut, tr.Reason, true
		}
		return EventStandbyEnded, tr.Reason, true
	}
	return "", "", false
}

// activityQueue bounds the entries waiting to be written; the observer
// drops beyond it rather than hold up the lease's transitions.
const activityQueue = 64

// activityWrite bounds one entry's write.
const activityWrite = 10 * time.Second

// Activity writes the engine's ownership events into the activity log. It
// is a module: it starts with the engine's facades, and it stops after the
// engine has released the lease and drained, before its backends close, so
// the release is logged too. Entries go straight to the engine's own opened
// document store, which a serving engine or a standby has: at a start or a
// shutdown no engine may be answering on NATS, and on shared backends it is
// the same store every engine writes. The document service refuses callers'
// writes to the log, the facade's included: an engine without a store of
// its own (a client, or one stopped before it opened its backends) keeps
// no entry.
type Activity struct {
	me  domain.Holder
	log *slog.Logger

	// current is the engine's lease state, ok false for a client; own is
	// the engine's opened document store, nil when it has none.
	current func() (domain.State, bool)
	own     func() ports.DocumentStore

	mu     sync.Mutex
	queue  chan ActivityEntry
	closed bool
	last   domain.State
	// waitedFor is the holder this engine stood by for.
	waitedFor domain.Holder
	changed   chan struct{}
	cancel    context.CancelFunc
	done      chan struct{}
}

// NewActivity returns an activity log for the engine me.
func NewActivity(me domain.Holder, log *slog.Logger) *Activity {
	return &Activity{me: me, log: log, queue: make(chan ActivityEntry, activityQueue), changed: make(chan struct{})}
}

// Name implements Module.
func (a *Activity) Name() string { return "activity-log" }

// Needs implements Module: none, since without a document service the log
// is simply not kept.
func (a *Activity) Needs() []string { return nil }

// Observe queues a transition's entry; it never blocks. Give it to the
// engine's Observe before the engine starts.
func (a *Activity) Observe(tr domain.Transition) {
	a.mu.Lock()
	defer a.mu.Unlock()
	event, detail, ok := eventOf(tr, a.me, a.waitedFor)
	if tr.To == domain.StateStandby {
		a.waitedFor = tr.Record.Holder
	}
	a.last = tr.To
	close(a.changed)
	a.changed = make(chan struct{})
	if !ok || a.closed {
		return
	}
	entry := ActivityEntry{
		InstanceID: a.me.InstanceID, Host: a.me.Host, PID: a.me.PID, Version: a.me.Version, Rollout: a.me.RolloutID,
		Event: event, Detail: detail, Revision: tr.Record.Revision, Time: time.Now().UTC().Format(activityTime),
	}
	select {
	case a.queue <- entry:
	default:
		a.log.Warn("activity log queue full; entry dropped", "event", event, "queued", activityQueue)
	}
}

// Start implements Module: it writes the entries queued so far, and those
// to come, from a goroutine.
func (a *Activity) Start(_ context.Context, env ModuleEnv) error {
	if env.Services.Document == nil {
		a.log.Info("activity log not kept: the document service is switched off")
		a.mu.Lock()
		a.closed = true
		a.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.mu.Lock()
	a.cancel, a.done = cancel, make(chan struct{})
	a.mu.Unlock()
	go a.run(ctx)
	return nil
}

func (a *Activity) run(ctx context.Context) {
	defer close(a.done)
	for entry := range a.queue {
		if err := a.write(ctx, entry); err != nil {
			a.log.Warn("activity log entry not written", "event", entry.Event, "err", err)
		}
	}
}

// write stores one entry under an id that sorts by time.
func (a *Activity) write(ctx context.Context, entry ActivityEntry) error {
	var docs ports.DocumentStore
	if a.own != nil {
		docs = a.own()
	}
	if docs == nil {
		// No store of its own: a client, or an engine stopped before it
		// opened its backends (one of role auto that became a client
		// still moves its lease state to released). Callers may not
		// write the log, this engine's facades included, and a write
		// there only held up its stop while no engine answered.
		a.log.Debug("activity log entry not kept: this engine opened no document store", "event", entry.Event)
		return nil
	}
	data, err := entryData(entry)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, activityWrite)
	defer cancel()
	if err := docs.EnsureCollection(ctx, ActivityCollection); err != nil {
		return err
	}
	_, err = docs.Put(ctx, ActivityCollection, entry.Time+"_"+entry.InstanceID, data, ports.IfVersion(0))
	return err
}

// Stop implements Module: it waits for the engine's last transition to be
// observed (the release happens just before modules stop, on another
// goroutine), then writes what is queued, within ctx.
func (a *Activity) Stop(ctx context.Context) error {
	a.awaitObserved(ctx)
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.queue)
	}
	done, cancel := a.done, a.cancel
	a.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
	case <-ctx.Done():
		cancel()
		<-done
	}
	cancel()
	return nil
}

// observedWait bounds how long Stop waits for a transition to reach the
// observer: it is on its way when Stop runs, or it never comes.
const observedWait = 2 * time.Second

func (a *Activity) awaitObserved(ctx context.Context) {
	if a.current == nil {
		return
	}
	want, ok := a.current()
	if !ok {
		return
	}
	t := time.NewTimer(observedWait)
	defer t.Stop()
	for {
		a.mu.Lock()
		seen, changed := a.last, a.changed
		a.mu.Unlock()
		if seen == want {
			return
		}
		select {
		case <-changed:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func entryData(e ActivityEntry) (map[string]any, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// History returns up to limit entries of the activity log, newest first;
// limit <= 0 means 100. A log never written is empty.
func History(ctx context.Context, docs ports.DocumentStore, limit int) ([]ActivityEntry, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []ActivityEntry
	cursor := ""
	for len(out) < limit {
		page, next, err := docs.Find(ctx, ActivityCollection, ports.Query{OrderBy: "time", Desc: true, Limit: min(limit-len(out), 100), Cursor: cursor})
		if errors.Is(err, ports.ErrNotFound) && cursor == "" {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the activity log: %w", err)
		}
		for _, d := range page {
			b, err := json.Marshal(d.Data)
			if err != nil {
				return nil, err
			}
			var e ActivityEntry
			if err := json.Unmarshal(b, &e); err != nil {
				return nil, fmt.Errorf("activity log entry %q: %w", d.ID, err)
			}
			out = append(out, e)
		}
		if next == "" || len(page) == 0 {
			break
		}
		cursor = next
	}
	return out, nil
}

// ownDocuments is the document store this engine opened, nil when it
// opened none (a client, or the service switched off).
func (e *Engine) ownDocuments() ports.DocumentStore {
	e.mu.Lock()
	l := e.local
	e.mu.Unlock()
	if l == nil {
		return nil
	}
	docs, _ := l.port(ports.ServiceDocument).(ports.DocumentStore)
	return docs
}

// leaseState is the engine's lease state; ok is false for a client.
func (e *Engine) leaseState() (domain.State, bool) {
	o := e.Ownership()
	if o == nil || e.Outcome() == domain.OutcomeClient {
		return 0, false
	}
	return o.State(), true
}

// activityLog adds the activity log to the engine's modules and has it
// observe the engine's transitions from the first.
func activityLog() fx.Option {
	return fx.Options(
		fx.Provide(
			func(me domain.Holder, log *slog.Logger) *Activity { return NewActivity(me, log) },
			fx.Annotate(func(a *Activity) Module { return a }, fx.ResultTags(`group:"modules"`)),
		),
		fx.Invoke(func(e *Engine, a *Activity) {
			a.current, a.own = e.leaseState, e.ownDocuments
			e.Observe(a.Observe)
		}),
	)
}
