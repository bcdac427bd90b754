// Package chaos runs three engine processes with continuous traffic over a
// three-node JetStream cluster on loopback (lease bucket R3, hot standby,
// each engine behind TCP proxies of its own) and injects faults: SIGSTOP of
// the holder for longer than half a lease, a cut of the holder's NATS
// connections, deletion and then corruption of the lease key, a restart of
// the node that leads the lease stream, a restart of the whole broker.
// Engines that exit are started again, as a supervisor would.
//
// The test is its only content. `go test ./internal/chaos` runs it at a
// short setting (one round of every fault, lease 1 s); ENGINE_CHAOS=normal
// (`make chaos`) runs more rounds with a 2 s lease; ENGINE_CHAOS=off or
// -short skips it. It builds on Unix only: it stops, resumes and kills the
// engines with signals Windows does not have.
//
// # What is asserted, and how it is seen
//
// An observer holds one NATS connection on which it receives, in the
// order the broker delivered them, both the events of every engine on
// abi.engine.events and the answers to its calls on
// abi.svc.engine.v1.info, which name the answering instance. An engine
// publishes its events and its answers on one connection, so for one
// engine the observer sees them in the order the engine sent them; and an
// engine that takes the lease publishes its move to serving before it
// subscribes to any call. Each call attempt is stamped when it is sent.
// The observer judges every successful answer, from engine A, to an
// attempt sent at time s:
//
//   - Overlap: another engine B had been seen to move to serving before s,
//     and A's own latest move to serving was seen before B's, whether or
//     not B still serves when the answer comes. Such a call reached A after
//     B took the lease, which A never took back, and A answered it: two
//     engines served at once. A call sent before B was seen serving may
//     still be answered by A: it is one A had accepted before it released
//     the lease or was fenced.
//   - Stale (serving after the fence): A had been seen to leave serving
//     (fenced, released, lost) before s and had not been seen to serve
//     again before its answer arrived. A took a call after it stopped
//     serving, past its fence time.
//   - An answer from an engine never seen serving counts as stale too.
//
// Both counts must be 0. Every fault ends with a recovery: all three
// engines started, the lease held by one of them, that engine serving by
// its events and having answered a call sent after the fault was undone.
// Every call sent after the recovery must be answered (each call retries
// on no responders and on 503 for up to 10 s).
package chaos
