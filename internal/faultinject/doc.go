// Package faultinject lets the fault suite (test/chaos) inject faults inside the operator at
// chosen points: a crash between two of its writes (as Sieve does), and a watch stream that loses
// intermediate states, stalls, reorders or breaks; caches that start from the past.
//
// Only a binary built with the build tag faultinject has any of it; in any other build (the
// shipped one) Install and HTTP leave everything as it is and the package compiles to nothing.
// With the tag, the environment chooses what happens:
//
//	TEARDOWN_CRASHPOINT_TRACE  a file to which each crash point is appended as "<n>\t<name>"
//	TEARDOWN_CRASHPOINT_AFTER  n: the process kills itself (SIGKILL) at the n-th crash point
//	TEARDOWN_FAULT_SCOPE       only requests (and watch events) of this namespace count
//	TEARDOWN_WATCH_FAULTS      watch faults, comma separated (see ParseWatchFaults)
//	TEARDOWN_TIME_TRAVEL       "<resourceVersion>:<hold>": the caches start from the past (see TimeTravel)
//
// A crash point is the moment after a write was answered and before the operator saw the answer:
// a mutating request to the API server (events, leases and access reviews aside: they record
// nothing a pipeline depends on) or a request of an http step, counted in the order they happen.
package faultinject

// Environment variables read by a binary built with the faultinject tag.
const (
	EnvTrace       = "TEARDOWN_CRASHPOINT_TRACE"
	EnvAfter       = "TEARDOWN_CRASHPOINT_AFTER"
	EnvScope       = "TEARDOWN_FAULT_SCOPE"
	EnvWatchFaults = "TEARDOWN_WATCH_FAULTS"
	EnvTimeTravel  = "TEARDOWN_TIME_TRAVEL"
)

// Watch fault modes.
const (
	// Coalesce holds the event; if a newer event of the same object comes within the fault's
	// duration, the held one is dropped (the operator never sees that intermediate state, as when
	// a watch folds quick changes), else it is delivered late.
	Coalesce = "coalesce"
	// Delay stalls the stream for the duration before the event (and so every later one).
	Delay = "delay"
	// Swap delivers the event after the next one, if that comes within the duration.
	Swap = "swap"
	// Close ends the stream right after the event: the reflector watches again from there.
	Close = "close"
	// Expire ends the stream right after the event and answers the next watch of the resource
	// 410 Gone: the reflector lists again.
	Expire = "expire"
)
