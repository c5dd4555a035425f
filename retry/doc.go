// Package retry is MusePi's auto-retry policy as pure, deterministic
// functions: classification, backoff, retry hints and limit waits, the
// retry budget's arithmetic, and the settings. It starts no goroutine,
// never reads the wall clock and uses no global randomness: the caller
// passes the time and a random source in. The retry chain that calls them
// is part of the session's core (package session).
package retry
