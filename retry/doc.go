// Package retry is MusePi's auto-retry policy as pure, deterministic code:
// classification, backoff, retry hints, settings and the retry chain state
// machine. It starts no goroutine, never reads the wall clock and uses no
// global randomness: the caller passes the time and a random source in, and
// executes the effects a Chain returns.
package retry
