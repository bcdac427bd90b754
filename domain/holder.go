package domain

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"time"
)

// Holder describes an engine process: the value stored under the lease key
// while that engine owns the account's kernel services.
type Holder struct {
	// InstanceID is 32 lowercase hex characters, made once per process. The
	// lease is held under it and every session the engine hosts is owned by it.
	InstanceID string
	Host       string
	PID        int
	Version    string
	// RolloutID names the release; an engine of another release stands by.
	RolloutID string
	StartedAt time.Time
	// Command marks the engine of one CLI command, which serves only while
	// no other engine does and releases the lease once its command
	// returns: an engine of role serve that finds one renewing waits, within
	// its start, for that release rather than fail naming it.
	Command bool
	// Released marks the record a holder writes on a clean release. Whoever
	// reads it may take the lease at once, without waiting for silence.
	Released bool
	// Lease is the lease the holder renews by (its Timing.Lease), which an
	// Ownership writes into its own record: a contender judges the holder
	// silent only after the longer of this and its own lease, since the
	// holder renews every quarter of it and serves until half of it has
	// passed without a renewal. While the holder keeps a key in its
	// quarantine it writes the quarantine instead, which may be longer: a
	// holder that served before the key went may serve on that long. Zero
	// in a record of an engine that did not write it.
	Lease time.Duration
}

// advertised is the lease h says it renews by, within the bounds a Timing
// allows; zero when it says none.
func (h Holder) advertised() time.Duration {
	if h.Lease <= 0 {
		return 0
	}
	return min(h.Lease, MaxLease)
}

// String names the holder the way errors and logs show it.
func (h Holder) String() string {
	if h.InstanceID == "" {
		return "an unknown engine (the lease value could not be read)"
	}
	rollout := h.RolloutID
	if rollout == "" {
		rollout = "none"
	}
	return fmt.Sprintf("engine %s on host %s (pid %d, version %s, rollout %s, since %s)",
		h.InstanceID, h.Host, h.PID, h.Version, rollout, h.StartedAt.UTC().Format(time.RFC3339))
}

// NewInstanceID returns a fresh 32-character lowercase hex instance id.
func NewInstanceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	return hex.EncodeToString(b[:])
}

var instanceIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// ValidInstanceID reports whether id has the form NewInstanceID makes.
func ValidInstanceID(id string) bool { return instanceIDPattern.MatchString(id) }

var rolloutIDPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$`)

// ValidateRolloutID accepts the empty id (no rollout) or an id such as an
// image tag: a letter, digit or underscore, then up to 127 of those or ".:-".
func ValidateRolloutID(id string) error {
	if id == "" || rolloutIDPattern.MatchString(id) {
		return nil
	}
	return fmt.Errorf("%w: rollout id %q must match %s", ErrInvalidConfig, id, rolloutIDPattern)
}

// ThisProcess describes the running process as a lease holder.
func ThisProcess(version, rolloutID string) Holder {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return Holder{
		InstanceID: NewInstanceID(),
		Host:       host,
		PID:        os.Getpid(),
		Version:    version,
		RolloutID:  rolloutID,
		StartedAt:  time.Now().UTC().Truncate(time.Second),
	}
}
