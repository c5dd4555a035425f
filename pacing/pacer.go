package pacing

import (
	"math"
	"slices"
	"time"

	"github.com/musepi/musepi/provider/ratelimit"
)

// Pacer is the budgets of one provider's credentials and the calls that
// wait for them. It is not safe for concurrent use: an actor owns it.
type Pacer struct {
	creds   []credential
	waiting []waiter // in release order: priority, then arrival
	seq     uint64   // arrivals so far
}

// credential is one credential's budget.
type credential struct {
	name    string
	buckets [numKinds]bucket
	blocked time.Time // until when the key refuses (a usage limit)
	// out are the calls granted on it and not settled yet, in grant
	// order.
	out []*grant
	// granted counts the grants made on it: each grant's seq.
	granted uint64
	// latest is the latest requests reset announced by a response read
	// (zero: none). Each request the server counts moves the instant its
	// requests window is full again later, and the window's refill does
	// not move it: the response announcing the latest one was the last the
	// server counted of those read.
	latest time.Time
}

// grant is a call granted on a credential and not settled yet.
type grant struct {
	id   string
	seq  uint64 // its place among the credential's grants
	need Need
	// held is what it holds of each budget: taken at its grant, or, once
	// a response announced the budget, the need the server holds (or will
	// hold once it counts the call).
	held [numKinds]float64
	// counted says the budget was last set from a response that counted
	// this call as the server's already (it was not subtracted as
	// pending).
	counted bool
}

// waiter is a call that waits for a budget.
type waiter struct {
	id       string // the caller's, unique among the waiters
	priority Priority
	seq      uint64
	prefer   string // its credential, kept when it fits
	need     Need
}

// Grant is a reservation made: the call may go out on Credential.
type Grant struct {
	ID         string
	Credential string
	// Switched says Credential is not the one the call preferred: the
	// preferred one had no room, this one had the most.
	Switched bool
}

// Decision is what Reserve decided: a Grant, or a wait.
type Decision struct {
	Grant
	// Wait, above 0, says the call waits: Release grants it once a budget
	// has room; Wait is how long that should take, for the call's
	// Credential and Limit, at the rates known now.
	Wait  time.Duration
	Limit Kind
}

// New returns the pacer of the credentials names, each with its
// configured limits (limits[name]; missing: none) full at now.
func New(names []string, limits map[string]Limits, now time.Time) *Pacer {
	p := &Pacer{creds: make([]credential, len(names))}
	for i, name := range names {
		p.creds[i].name = name
		for k := range Kind(numKinds) {
			p.creds[i].buckets[k].configure(limits[name].perMinute(k), now)
		}
	}
	return p
}

// Reserve reserves need for call id (of priority, preferring credential
// prefer): on prefer when it has room, else on the credential with the most
// room; when none has room, or when calls of the same or a higher priority
// already wait, the call waits.
func (p *Pacer) Reserve(now time.Time, id string, priority Priority, prefer string, need Need) Decision {
	p.advance(now)
	if !p.queuedAtOrAbove(priority) {
		if g, ok := p.fit(now, id, prefer, need); ok {
			return Decision{Grant: g}
		}
	}
	p.seq++
	w := waiter{id: id, priority: priority, seq: p.seq, prefer: prefer, need: need}
	at, _ := slices.BinarySearchFunc(p.waiting, w, func(a, b waiter) int {
		if a.priority.Rank() != b.priority.Rank() {
			return a.priority.Rank() - b.priority.Rank()
		}
		return int(a.seq) - int(b.seq)
	})
	p.waiting = slices.Insert(p.waiting, at, w)
	d := Decision{Grant: Grant{ID: id, Credential: prefer}}
	d.Credential, d.Wait, d.Limit = p.soonest(now, need, prefer)
	if qw, k := p.queueWait(now, at); qw > d.Wait {
		d.Wait, d.Limit = qw, k
	}
	d.Wait = max(d.Wait, time.Nanosecond)
	return d
}

// queueWait estimates how long until the waiting call at index i goes:
// the needs of the calls before it and its own, against the room and the
// refill of every unblocked key together; and the kind that takes longest.
func (p *Pacer) queueWait(now time.Time, i int) (time.Duration, Kind) {
	var total [numKinds]float64
	for _, w := range p.waiting[:i+1] {
		for k := range Kind(numKinds) {
			total[k] += w.need.of(k)
		}
	}
	var longest time.Duration
	limit := ratelimit.Requests
	for k := range Kind(numKinds) {
		var level, rate float64
		for c := range p.creds {
			if b := &p.creds[c].buckets[k]; b.known() && !p.creds[c].blocked.After(now) {
				level, rate = level+b.level, rate+b.rate
			}
		}
		if short := total[k] - level; short > 0 && rate > 0 {
			if w := time.Duration(math.Ceil(short / rate * float64(time.Second))); w > longest {
				longest, limit = w, k
			}
		}
	}
	return longest, limit
}

// queuedAtOrAbove reports whether a call of priority or a more urgent one
// waits.
func (p *Pacer) queuedAtOrAbove(priority Priority) bool {
	return len(p.waiting) > 0 && p.waiting[0].priority.Rank() <= priority.Rank()
}

// fit reserves need for call id on prefer when it has room, else on the
// unblocked credential with the most room; false when none has room.
func (p *Pacer) fit(now time.Time, id, prefer string, need Need) (Grant, bool) {
	best, bestRoom := -1, 0.0
	for i := range p.creds {
		c := &p.creds[i]
		if !c.fits(need) || (c.name != prefer && c.blocked.After(now)) {
			continue
		}
		if c.name == prefer {
			best = i
			break
		}
		if room := c.room(need); best < 0 || room > bestRoom {
			best, bestRoom = i, room
		}
	}
	if best < 0 {
		return Grant{}, false
	}
	c := &p.creds[best]
	c.reserve(id, need)
	return Grant{ID: id, Credential: c.name, Switched: prefer != "" && c.name != prefer}, true
}

// soonest is the unblocked credential (or prefer) where need fits first
// (prefer on a tie), how long that takes and the kind it waits for.
func (p *Pacer) soonest(now time.Time, need Need, prefer string) (string, time.Duration, Kind) {
	name, wait, limit := prefer, time.Duration(-1), ratelimit.Requests
	for i := range p.creds {
		c := &p.creds[i]
		if c.name != prefer && c.blocked.After(now) {
			continue
		}
		w, k := c.wait(need)
		if wait < 0 || w < wait || (w == wait && c.name == prefer) {
			name, wait, limit = c.name, w, k
		}
	}
	return name, max(wait, 0), limit
}

// Release grants the waiting calls that now fit, in priority order; it
// stops at the first that does not, so that no call passes one of a more
// urgent priority, or an earlier one of its own.
func (p *Pacer) Release(now time.Time) []Grant {
	p.advance(now)
	var out []Grant
	for len(p.waiting) > 0 {
		w := p.waiting[0]
		g, ok := p.fit(now, w.id, w.prefer, w.need)
		if !ok {
			break
		}
		out = append(out, g)
		p.waiting = slices.Delete(p.waiting, 0, 1)
	}
	return out
}

// NextRelease is when the first waiting call should fit (false: none
// waits).
func (p *Pacer) NextRelease(now time.Time) (time.Time, bool) {
	if len(p.waiting) == 0 {
		return time.Time{}, false
	}
	p.advance(now)
	_, wait, _ := p.soonest(now, p.waiting[0].need, p.waiting[0].prefer)
	return now.Add(max(wait, time.Millisecond)), true
}

// Cancel forgets the waiting call id; false when it does not wait.
func (p *Pacer) Cancel(id string) bool {
	i := slices.IndexFunc(p.waiting, func(w waiter) bool { return w.id == id })
	if i < 0 {
		return false
	}
	p.waiting = slices.Delete(p.waiting, i, i+1)
	return true
}

// Block keeps calls off credential until until (a usage limit), unless
// it is the one they hold.
func (p *Pacer) Block(credential string, until time.Time) {
	if c := p.credential(credential); c != nil {
		c.blocked = until
	}
}

// Waiting is how many calls wait, by priority: high, normal, low.
func (p *Pacer) Waiting() [3]int {
	var n [3]int
	for _, w := range p.waiting {
		n[w.priority.Rank()]++
	}
	return n
}

// Settle ends the granted call id with what it used: what it holds comes
// back, less what it used (a failed call that was sent spends its request
// and the tokens reported, often none). It returns the grant's seq, which
// orders its response among the credential's (Observe); 0 when id holds
// no grant.
func (p *Pacer) Settle(now time.Time, id string, used Usage) uint64 {
	c, i := p.outstanding(id)
	if c == nil {
		return 0
	}
	g := c.out[i]
	c.out = slices.Delete(c.out, i, i+1)
	if g.counted && used.Input == 0 && used.Output == 0 {
		// The budget was last set from a response that took this call as
		// counted by the server: one that reports no usage was refused,
		// failed or never sent, and the server holds nothing of it that
		// the budget does not show already.
		return g.seq
	}
	for k := range Kind(numKinds) {
		b := &c.buckets[k]
		b.advance(now)
		b.give(g.held[k] - used.of(k))
	}
	return g.seq
}

// Observe takes the limits the response of credential's grant seq
// announced (its call settled first; seq 0: a call that reserved nothing).
//
// Responses come back in any order, and the server may count calls in
// another order than they were granted: a response can be older news than
// the budget, one the server sent before others read already. A response
// that announces a requests reset later than every one read before was
// the last the server counted of them (a tie, as a refusal or Anthropic's
// whole seconds give, proves nothing): it sets the budget, up or down, to
// what remains less what every call still out takes (some of them the
// server may have counted already: the budget errs low, never high). Any
// other response only lowers a budget already known, to what remains less
// what the calls granted after it and still out take (the server counted
// those granted before it, as far as grants and counts keep one order).
// The first response of a key whose limits were not known sets them.
func (p *Pacer) Observe(now time.Time, credential string, seq uint64, s ratelimit.Snapshot) {
	c := p.credential(credential)
	if c == nil {
		return
	}
	latest := false
	if l, ok := s.Get(ratelimit.Requests); ok && l.Reset.After(c.latest) {
		latest, c.latest = true, l.Reset
	}
	for k := range Kind(numKinds) {
		l, ok := s.Get(k)
		if !ok {
			continue
		}
		b := &c.buckets[k]
		set := latest || !b.known()
		b.observeLimit(l)
		var pending float64
		for _, g := range c.out {
			g.held[k] = b.capped(g.need.of(k))
			if set || seq == 0 || g.seq > seq {
				pending += g.held[k]
			}
		}
		if b.observe(l, pending, set, now) {
			for _, g := range c.out {
				g.counted = !set && seq != 0 && g.seq < seq
			}
		}
	}
}

// Level is what one credential has left of one kind of limit.
type Level struct {
	Credential string
	Kind       Kind
	Remaining  float64 // below 0 when more was spent than the window holds
}

// Levels are what each credential has left now of each limit known.
func (p *Pacer) Levels(now time.Time) []Level {
	var out []Level
	for i := range p.creds {
		c := &p.creds[i]
		for k := range c.buckets {
			if b := &c.buckets[k]; b.known() {
				b.advance(now)
				out = append(out, Level{Credential: c.name, Kind: Kind(k), Remaining: b.level})
			}
		}
	}
	return out
}

// Paced reports whether any credential has a limit known.
func (p *Pacer) Paced() bool {
	for i := range p.creds {
		for k := range p.creds[i].buckets {
			if p.creds[i].buckets[k].known() {
				return true
			}
		}
	}
	return false
}

func (p *Pacer) credential(name string) *credential {
	for i := range p.creds {
		if p.creds[i].name == name {
			return &p.creds[i]
		}
	}
	return nil
}

func (p *Pacer) advance(now time.Time) {
	for i := range p.creds {
		for k := range p.creds[i].buckets {
			p.creds[i].buckets[k].advance(now)
		}
	}
}

// fits reports whether need fits every limit of c now.
func (c *credential) fits(need Need) bool {
	for k := range c.buckets {
		if c.buckets[k].wait(need.of(Kind(k))) > 0 {
			return false
		}
	}
	return true
}

// room is the least share left of any of c's limits after need.
func (c *credential) room(need Need) float64 {
	room := 1.0
	for k := range c.buckets {
		room = min(room, c.buckets[k].headroom(need.of(Kind(k))))
	}
	return room
}

// wait is how long until need fits c, and the kind that takes longest.
func (c *credential) wait(need Need) (time.Duration, Kind) {
	var longest time.Duration
	limit := ratelimit.Requests
	for k := range c.buckets {
		if w := c.buckets[k].wait(need.of(Kind(k))); w > longest {
			longest, limit = w, Kind(k)
		}
	}
	return longest, limit
}

// reserve takes need from every limit of c for call id.
func (c *credential) reserve(id string, need Need) {
	c.granted++
	g := &grant{id: id, seq: c.granted, need: need}
	for k := range c.buckets {
		b := &c.buckets[k]
		b.take(need.of(Kind(k)))
		g.held[k] = b.capped(need.of(Kind(k)))
	}
	c.out = append(c.out, g)
}

// outstanding is the credential and the index in its out of call id's
// latest grant (nil: none).
func (p *Pacer) outstanding(id string) (*credential, int) {
	for i := range p.creds {
		c := &p.creds[i]
		for j := len(c.out) - 1; j >= 0; j-- {
			if c.out[j].id == id {
				return c, j
			}
		}
	}
	return nil, -1
}
