package session

import (
	"time"

	"github.com/musepi/musepi/messages"
)

// Pacing: on a paced provider (Config.Paced) each turn reserves its need
// from its key's rate-limit budget when it asks the credentials actor for
// the key (SelectCredential with Pace; the reservation's token is the
// turn's number). The answer grants a key, or says the turn waits: the
// core then emits rate_limit_wait and stays selecting until the grant.
// A pacing wait is not a retry: it counts no attempt, and a 429 that
// still comes is the retry policy's as ever. An abort, or abort_retry,
// ends the wait and the prompt; a turn's end settles its reservation.
// The rate limits a turn's response announces go to the pacer as its
// headers arrive (InRateLimits), or else with the settle of its
// reservation (InTurnEnded's Limits): the pacer learns every key's budget
// from the core, whether the turn reserved or not.

// RateLimitWait is a turn that waits for its key's rate-limit budget:
// how long it should take, on which key, for which limit ("requests",
// "tokens", "input_tokens" or "output_tokens").
type RateLimitWait struct {
	Model      string // "provider/model" in use
	Credential string
	Limit      string
	Delay      time.Duration
}

// paced reports whether the model in use is on a paced provider.
func (c *Core) paced() bool { return c.pacedProviders[provider(c.r.Model)] }

// credentialAnswer takes the credentials actor's answer to
// SelectCredential: a key, or, for a paced turn, a wait or the grant that
// ends it (Token: the reservation's).
func (c *Core) credentialAnswer(in Input) {
	if in.Token == 0 {
		c.credentialSelected(in.Credential)
		return
	}
	if c.r.State != SelectingCredential || in.Token != c.r.Turn+1 {
		if in.Wait == 0 { // a grant no turn takes: its reservation goes back
			c.cancelReservation(in.Token)
		}
		return
	}
	c.r.Reservation = in.Token
	c.queued = false
	if in.Queued > 0 {
		c.capacityQueued(in)
		return
	}
	if in.Wait > 0 { // the turn waits for the key named: the session holds it
		c.r.Credential = in.Credential
		w := c.out.waits.add()
		*w = RateLimitWait{Model: c.r.Model, Credential: in.Credential, Limit: in.Limit, Delay: in.Wait}
		c.emit(EventRateLimitWait).Wait = w
		return
	}
	if in.Model != "" && in.Model != c.r.Model {
		c.switchModel(in.Model, ReasonCapacity)
	}
	if in.Switched && in.Credential != c.r.Credential {
		sw := c.out.switches.add()
		*sw = CredentialSwitch{Model: c.r.Model, From: c.r.Credential, To: in.Credential, Reason: SwitchPacing}
		c.emit(EventCredentialSwitch).Switch = sw
	}
	c.credentialSelected(in.Credential)
}

// pacingWait reports whether a turn waits for its key's budget.
func (c *Core) pacingWait() bool { return c.r.State == SelectingCredential && c.r.Reservation != 0 }

// endPacingWait ends a turn's pacing wait, after an abort or abort_retry:
// the reservation is dropped and the prompt settles.
func (c *Core) endPacingWait() {
	c.cancelReservation(c.r.Reservation)
	c.r.Reservation = 0
	if c.r.FailureKind == "" {
		c.r.FailureKind, c.r.Failure = KindAborted, "rate limit wait cancelled"
		if c.queued {
			c.r.Failure = "capacity wait cancelled"
		}
	}
	c.queued = false
	c.settle()
}

// cancelReservation drops reservation token at the credentials actor.
func (c *Core) cancelReservation(token uint64) {
	e := c.add(CancelReservation)
	e.Model, e.Token = c.r.Model, token
}

// rateLimitsSeen tells the pacer the limits the running turn's response
// announced as its headers arrived at: a provider that is not paced has
// no pacer to tell.
func (c *Core) rateLimitsSeen(limits *messages.RateLimits, at time.Time) {
	if !c.paced() || limits == nil {
		return
	}
	e := c.add(ObserveRateLimits)
	e.Model, e.Credential, e.Limits, e.At = c.r.Model, c.r.Credential, limits, at
}

// settleReservation ends the reservation of the turn that ended (none:
// the turn on a paced provider reserved nothing, but its response may
// still announce its key's limits, which the settle carries).
func (c *Core) settleReservation(model string, msg *messages.AssistantMessage, limits *messages.RateLimits) {
	if p := provider(model); !c.pacedProviders[p] && !c.limitedProviders[p] {
		return
	}
	e := c.add(SettleReservation)
	e.Model, e.Credential, e.Token, e.Message, e.Limits = model, c.r.Credential, c.r.Reservation, msg, limits
	c.r.Reservation = 0
}
