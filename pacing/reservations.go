package pacing

import (
	"time"

	"github.com/musepi/musepi/provider/ratelimit"
)

// Reservations are the reservations of one provider's paced turns: the
// budgets of its keys (a Pacer), each session's one reservation, granted
// and not yet settled or waiting for a grant, where each waiting turn's
// grant goes (To, of type A: an address it never reads), and what the
// answers teach of the turns' needs (OutputEstimator, InputScale). It ties
// each settle, cancel and grant to its turn by the turn's ticket, so the
// credentials actor that owns it only carries out what it returns: it
// sends the grants, makes each granted key its session's and arms the
// release timer for NextRelease. Pure like the Pacer (every method takes
// now); not safe for concurrent use.
type Reservations[A any] struct {
	pacer   *Pacer
	output  OutputEstimator
	input   InputScale
	granted map[string]reservation[A] // session -> its turn's, granted
	waiting map[string]reservation[A] // session -> its turn's, waiting
	out     []Granted[A]              // what Release returns, reused
}

// reservation is one turn's (the pacer holds what it reserved): its
// ticket, its model, its input as estimated and whether its output
// was an estimate (its answer teaches both), and where its grant goes
// while it waits.
type reservation[A any] struct {
	ticket    uint64
	model     string
	input     int64
	estimated bool
	to        A
}

// Turn is a turn that asks to reserve its need.
type Turn[A any] struct {
	Session string
	// Ticket ties the turn's settle, cancel and grant to it.
	Ticket   uint64
	Priority Priority
	// Prefer is the key the session holds ("": none yet).
	Prefer string
	// Model is whose answers teach the estimates of its need.
	Model string
	// Need is its input as estimated (EstimateInput), which Reserve scales
	// as the provider counts the model's input (InputScale), and its
	// max_tokens when Bounded; unbounded, Reserve reserves what the
	// model's answers use (OutputEstimator).
	Need Need
	// To is where its grant goes, should it wait.
	To A
}

// Granted is a waiting turn granted: Grant's ID is its session, Ticket
// its ticket, and the grant goes to To.
type Granted[A any] struct {
	Grant
	Ticket uint64
	To     A
}

// Settlement is a granted turn's end, as its session tells it.
type Settlement struct {
	Session    string
	Ticket     uint64
	Credential string // the key it went out on
	// Limits are what its response announced, unless they were observed
	// as its headers arrived (empty: none).
	Limits ratelimit.Snapshot
	Used   Usage
	// CachedInput is the input the provider reported as read from its
	// cache, beside Used.Input: the input estimate covered it too.
	CachedInput int64
}

// NewReservations returns the reservations of the credentials names, on
// a Pacer made as New makes it, none held; their grants go to addresses
// of type A.
func NewReservations[A any](names []string, limits map[string]Limits, now time.Time, opts Options) *Reservations[A] {
	return &Reservations[A]{pacer: New(names, limits, now, opts), granted: map[string]reservation[A]{}, waiting: map[string]reservation[A]{}}
}

// Pacer is the budgets the reservations draw from, for reading (Paced,
// Levels, Waiting) and for the blocks of keys (a credentials.Blocker).
func (r *Reservations[A]) Pacer() *Pacer { return r.pacer }

// Waiting is how many turns wait for a grant.
func (r *Reservations[A]) Waiting() int { return len(r.waiting) }

// Reserve reserves turn t's need (see Pacer.Reserve): granted on its key
// or the one with the most room, a wait that a release ends (its grant
// goes to t.To), or too large for every key (nothing held). A session
// holds one reservation: one it left unsettled (a lost answer) is dropped
// first, and released lists the waiting turns that fit then. paced is
// false, and nothing is reserved or dropped, when no key is paced (every
// key answered without rate-limit headers and has no limit configured):
// the turn goes out on its key holding no reservation.
func (r *Reservations[A]) Reserve(now time.Time, t Turn[A]) (d Decision, paced bool, released []Granted[A]) {
	if !r.pacer.Paced() {
		return Decision{}, false, nil
	}
	released = r.Cancel(now, t.Session, 0)
	need := t.Need
	need.Input = r.input.Scale(t.Model, need.Input)
	if !need.Bounded {
		need.Output = r.output.Estimate(t.Model)
	}
	d = r.pacer.Reserve(now, t.Session, t.Priority, t.Prefer, need)
	res := reservation[A]{ticket: t.Ticket, model: t.Model, input: t.Need.Input, estimated: !need.Bounded}
	switch {
	case d.TooLarge.Limit > 0: // nothing held
	case d.Wait > 0:
		res.to = t.To
		r.waiting[t.Session] = res
	default:
		r.granted[t.Session] = res
	}
	return d, true, released
}

// Settle ends the granted turn of s.Session whose ticket is s.Ticket
// (another ticket, or a turn still waiting: nothing) with what it used:
// the budget takes what it was charged, its input teaches the input
// scale and its output, if reserved as an estimate, the output estimate.
// The limits its response announced are taken first (the grant tells
// which calls the response counted). It returns the waiting turns that
// fit then (see Release).
func (r *Reservations[A]) Settle(now time.Time, s Settlement) []Granted[A] {
	r.pacer.Observe(now, s.Credential, s.Session, now, s.Limits)
	if res, ok := r.granted[s.Session]; ok && res.ticket == s.Ticket {
		delete(r.granted, s.Session)
		r.pacer.Settle(now, s.Session, s.Used)
		r.input.Observe(res.model, res.input, s.Used.Input+s.CachedInput)
		if res.estimated {
			r.output.Observe(res.model, s.Used.Output)
		}
	}
	return r.Release(now)
}

// Observe takes the limits a response on credential announced to
// session's turn as its headers arrived (see Pacer.Observe): a cold key's
// first headers end its cold start. It returns the waiting turns that fit
// then (see Release).
func (r *Reservations[A]) Observe(now time.Time, credential, session string, arrived time.Time, s ratelimit.Snapshot) []Granted[A] {
	r.pacer.Observe(now, credential, session, arrived, s)
	return r.Release(now)
}

// Cancel drops session's reservation whose ticket is ticket (0: any): a
// waiting turn leaves the queue, a granted one never sent gives back what
// it reserved. It returns the waiting turns that fit then (see Release).
func (r *Reservations[A]) Cancel(now time.Time, session string, ticket uint64) []Granted[A] {
	if res, ok := r.waiting[session]; ok && (ticket == 0 || res.ticket == ticket) {
		delete(r.waiting, session)
		r.pacer.Cancel(session)
	}
	if res, ok := r.granted[session]; ok && (ticket == 0 || res.ticket == ticket) {
		delete(r.granted, session)
		r.pacer.Settle(now, session, Usage{})
	}
	return r.Release(now)
}

// Release grants the waiting turns that fit now, in priority order, then
// arrival (see Pacer.Release): each is granted from then on, until its
// settle or cancel. The slice is reused by the next call that releases
// (Settle, Observe, Cancel, Reserve, Release).
func (r *Reservations[A]) Release(now time.Time) []Granted[A] {
	r.out = r.out[:0]
	if len(r.waiting) == 0 {
		return r.out
	}
	for _, g := range r.pacer.Release(now) {
		res := r.waiting[g.ID] // the pacer's waiting calls are these turns
		delete(r.waiting, g.ID)
		r.out = append(r.out, Granted[A]{Grant: g, Ticket: res.ticket, To: res.to})
		res.to = *new(A)
		r.granted[g.ID] = res
	}
	return r.out
}

// NextRelease is when the next waiting turn should go (false: none
// waits): when to release again.
func (r *Reservations[A]) NextRelease(now time.Time) (time.Time, bool) {
	return r.pacer.NextRelease(now)
}
