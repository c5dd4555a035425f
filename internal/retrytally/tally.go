// Package retrytally counts a session's retries from its events, by the
// one rule every summary of MusePi follows (docs/retry-policy.md, "Terms"):
// retry n/max is announced by its auto_retry_start and made once its call
// goes out, at the agent_start that follows; until then it is pending, and
// a pending retry that a cancel ends was never made. auto_retry_end's
// attempt is not that count: it names the retry refused when a wait is over
// retry.maxDelayMs, and the pending one when the backoff is cancelled.
package retrytally

import "github.com/musepi/musepi"

// Tally counts retries from a session's events, given in order. The zero
// value is an empty tally.
type Tally struct {
	pending bool // an auto_retry_start whose call has not gone out
	chain   int  // retries made in the open chain
	ended   int  // retries made in the chain that ended last
	made    int  // retries made in all
}

// Add counts ev.
func (t *Tally) Add(ev musepi.Event) {
	switch e := ev.(type) {
	case musepi.AutoRetryStart:
		t.pending = true
	case musepi.AgentStart:
		if t.pending && e.User == nil { // a retry's call; a prompt's has its user message
			t.pending = false
			t.chain++
			t.made++
		}
	case musepi.AutoRetryEnd:
		t.ended, t.chain, t.pending = t.chain, 0, false
	}
}

// Made is the number of retries made in all.
func (t *Tally) Made() int { return t.made }

// Ended is the number of retries the last chain to end made: what its
// auto_retry_end, once added, summarises.
func (t *Tally) Ended() int { return t.ended }
