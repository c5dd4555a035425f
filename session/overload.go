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
// included), and about how long (0: unknown); or a retry that waits for
// a cooling model to come back (waitForCooling): Queued 0, and its delay.
type CapacityWait struct {
	Model  string // "provider/model" in use
	Queued int
	Delay  time.Duration
}

// waitForCooling: a retry on a limited provider (Config.QueueWait) whose
// model and every fallback of its role are cooling down waits for the
// first of them to come back (back), at most QueueWait (and never past
// retry.maxDelayMs), rather than retry into a model that cools every
// backoff: capacity_wait {delayMs}, then the attempt's auto_retry_start
// with that delay. The wait spends no retry: the attempt after it is the
// one the chain counts. Beyond the reference policy.
func (c *Core) waitForCooling(back time.Time) {
	ch := &c.r.Chain
	if !c.limited() || c.queueWait <= 0 || !back.After(c.now) {
		return
	}
	wait := min(back.Sub(c.now), c.queueWait)
	if m := c.settings.MaxDelay; m > 0 {
		wait = min(wait, m)
	}
	if wait <= ch.Delay {
		return
	}
	ch.Delay = wait
	w := c.out.capacity.add()
	*w = CapacityWait{Model: c.r.Model, Delay: wait}
	c.emit(EventCapacityWait).Capacity = w
}

// ReasonCapacity is the reason of the model change that seats a turn on
// a fallback at once, its own model's concurrency limit full (the
// credentials actor's answer names the model: Input.Model). No cooldown
// is set: the session returns to its primary at its next prompt or
// continue (cooldown-expiry), or stays (never). Beyond the reference
// policy.
const ReasonCapacity = "capacity"

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
