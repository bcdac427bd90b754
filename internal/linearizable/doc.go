// Package linearizable checks that the kernel services stay linearizable
// while the engine that serves them changes: concurrent clients call
// keyvalue (get, set, set_if_absent, delete) and document (get, and put and
// delete conditional on a version) on a few shared keys, through the NATS
// client facades, to real engine processes on shared PostgreSQL; meanwhile
// the engines go through two deploys (SIGTERM of the holder, a standby of
// the next release takes over; in the second, the holder's accepting
// connection to the broker stalls across the handover), a pause of the
// holder past its lease
// (SIGSTOP until a standby serves and calls sent after the takeover wait
// at the paused holder, then SIGCONT) and a crash (SIGKILL; a standby
// takes over after a lease of silence), in rounds. The standby
// that takes over from a paused or killed holder is a hot standby of its
// release in the first round, a standby of the next release in the
// second, and so on. Every call is recorded with when it was sent and when it was answered, and the history
// is checked with porcupine against a sequential model of each store,
// partitioned by key.
//
// The history follows the protocol's promises:
//
//   - A call answered 503 (wire.ErrUnavailable, also what the facade
//     reports once nobody answered through its retries) did nothing: it is
//     left out of the history. If an engine answered 503 and wrote anyway,
//     the history shows a write that no recorded call made, and the check
//     fails.
//   - A write answered 500 (wire.ErrInterrupted, or any other failure) or
//     not answered before the client gave up may have happened, at any time
//     after it was sent: it is recorded with an unknown outcome and no
//     return (porcupine's math.MaxInt64). A read without an answer tells
//     nothing and is left out.
//   - Every other answer, a value, "not found", "conflict", is definite.
//
// Through a pause every client waits on a call the paused holder took
// before the takeover, so the calls sent after it come from late clients
// that run through the pause only, started once the successor has
// subscribed (before, their sets could all reach the paused holder, and
// none read back through it a value the successor wrote): each sets a key
// of its own that the
// holder read before it was stopped, and reads it back, until one of its
// calls waits at the paused holder. The holder, resumed, must refuse
// those; one that answered a read from what it kept of its old term fails
// the check.
//
// A deploy that hands over as it comes sends the draining holder no call
// after its successor has written: it stops accepting as soon as its
// release is written. So the engines' connections go through the test's
// proxy (internal/tcpproxy), and in the second deploy of a round the
// holder's accepting connection stalls there, known by its name, both
// ways, from before the SIGTERM: the end of its subscriptions waits in
// the proxy, and the broker goes on handing it calls after the successor
// serves, as it does to an engine whose connection is slow. Late
// clients, as in a pause, set their keys through it and read them back, until a call of each
// waits at the holder; then the proxy lets it go, and the holder drains
// those calls. One that answered the reads from what it kept of its
// term, not from the table, answers values its successor has
// overwritten, and fails the check.
//
// The facade sends a call refused with 503 again, so most refusals never
// reach the history; the test counts every answer the engines sent, 503s
// included, by watching the clients' reply subjects, and logs the counts
// with the engines' lease transitions, so a run shows how often each path
// was taken.
//
// A history that is not linearizable fails the test, and porcupine's
// visualization of it is written to the test's artifact directory (kept
// with `go test -artifacts`), whose path the failure names.
//
// The test is the package's only content. `go test ./internal/linearizable`
// runs it at a short setting (one round of every fault, lease 2 s);
// ENGINE_LINEARIZABLE=long (`make linearizable`) runs more rounds with more
// clients; ENGINE_LINEARIZABLE=off or -short skips it. It needs PostgreSQL
// (ENGINE_TEST_PG_DSN) and skips without it, unless
// ENGINE_TEST_REQUIRE_BACKENDS=1. It builds on Unix only, as it stops and
// resumes the holder with SIGSTOP and SIGCONT, which Windows does not have;
// the models' own tests (model_test.go) build everywhere.
package linearizable
