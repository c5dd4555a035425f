package session

import "time"

// Overload: on a provider whose credentials actor keeps an overload
// limiter (Config.Limited), each turn asks for a place within its model's
// concurrency limit in the same round trip that asks for its key
// (SelectCredential with Pace and the turn's token, as a paced turn
// reserves): no extra message. The answer grants a place, or says the
// turn is queued (Input.Queued): it then waits in SelectingCredential, as
// a pacing wait does, until the grant. A queued turn is not an attempt:
// it counts toward no retry limit. An abort, or abort_retry, ends the
// wait and the prompt, its place given up (CancelReservation); a turn's
// end frees its place with its outcome (SettleReservation), which the
// session's owner reads off the message (overload.OutcomeOf).

// limited reports whether the model in use is on a provider with an
// overload limiter.
func (c *Core) limited() bool { return c.limitedProviders[provider(c.r.Model)] }

// gated reports whether each turn on the model in use asks its
// credentials actor before it goes (a pacing reservation, a place in
// the overload limit), even with its key held and free.
func (c *Core) gated() bool { return c.paced() || c.limited() }

// CapacityWait is a turn that waits for a place within its model's
// concurrency limit: the model, how many turns wait for it (this one
// included), and about how long (0: unknown).
type CapacityWait struct {
	Model  string // "provider/model" in use
	Queued int
	Delay  time.Duration
}

// capacityQueued takes the answer that queues the turn for a place in its
// model's limit (capacity_wait): the session holds the key named while it
// waits.
func (c *Core) capacityQueued(in Input) {
	c.r.Credential = in.Credential
	c.queued = true
	w := c.out.capacity.add()
	*w = CapacityWait{Model: c.r.Model, Queued: in.Queued}
	c.emit(EventCapacityWait).Capacity = w
}
