// Package httpstep implements the http step: one request per attempt to an external API, built
// on go-retryablehttp, with a CEL successCondition and outputs over the response, and polling
// for asynchronous work.
//
// Requests never hold a reconcile for long. A reconcile renders the request, starts it in a
// goroutine and waits a short while (Options.InlineWait); a response that comes later wakes the
// run, and its next reconcile uses it. The step's progress (how many requests it has used, when
// the next poll is due) lives in the run status, so a restart resumes where it stopped; a
// request in flight at a crash is sent again, with the same Idempotency-Key.
//
// Transient failures (no connection, timeouts, 429, 5xx) fail the attempt as retryable, with
// Retry-After as the delay, and the engine retries within the step's retry limit. Other 4xx
// fail at once.
//
// For a TeardownPolicy, destinations in loopback, link-local, private and other special ranges
// and the cluster's API server (its address and port) are refused unless allowed
// (Options.AllowedDestinations). Hosts written as numbers ("2130706433", "127.1", "0x7f.1") are
// read as the IPv4 addresses they spell, never looked up. Host names are resolved once per
// connection and only checked addresses are dialled, and redirects
// go only where the check allows and only to the same scheme, host and port. Requests carry
// only the credentials the policy names: no proxy from the environment, no cookies, and never
// the operator's own token. Values read from Secrets and credential headers are removed from
// every message and output the step writes.
package httpstep
