// Package session is the pure state machine of one MusePi session (the
// raft Step model): Core.Step takes an input (a prompt, a turn's end, a
// timer firing, an abort, an answer of the credential, fallback or budget
// actors) at an instant and returns the effects its owner must carry out
// (start a turn, arm a timer, emit an event, append to history, settle the
// prompt). It holds the whole lifecycle of a prompt once — generation, turn,
// the retry chain (its attempt and pending question) and the settle
// condition — in one State, whose phases include the chain's (awaiting a
// credential, a fallback model or the budget; backoff), each with its step
// function (state.go); it starts no goroutine, reads no clock and draws no
// random number of its own.
package session
