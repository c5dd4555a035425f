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
	opts    Options
}

// Options tune a Pacer; the zero value gives the defaults.
type Options struct {
	// StickyWait is how long a call may wait for the credential it prefers
	// (the one its session last used) rather than move to another with
	// room: providers cache prompt prefixes per organization, and a move
	// throws the session's cache away. 0 is DefaultStickyWait; below 0, a
	// call moves at once.
	StickyWait time.Duration
	// Probes is how many calls go out on a key whose limits are not known
	// (none configured, no response read yet) before a response tells
	// them; the others wait. 0 is DefaultProbes.
	Probes int
	// Refunds says the provider gives back the output a call that set
	// max_tokens did not use (Anthropic); without, it keeps what it charged
	// at admission (OpenAI).
	Refunds bool
	// Window is the shortest window the provider is known to enforce its
	// per-minute limits over (a minute or more: the whole minute's worth
	// may go at once). 0, unknown, starts each key at a second's worth
	// and learns (see burst).
	Window time.Duration
}

// DefaultStickyWait is Options.StickyWait's default.
const DefaultStickyWait = 2 * time.Second

// DefaultProbes is Options.Probes' default: one call tells a key's limits.
const DefaultProbes = 1

// coldWait is the wait a call on a cold key is told: its probe's headers
// end it, usually well before.
const coldWait = time.Second

// waiter is a call that waits for a budget.
type waiter struct {
	id       string // the caller's, unique among the waiters
	priority Priority
	seq      uint64
	since    time.Time // when it began to wait
	prefer   string    // its credential, kept when it fits soon enough
	need     Need
}

// Grant is a reservation made: the call may go out on Credential.
type Grant struct {
	ID         string
	Credential string
	// Switched says Credential is not the one the call preferred: the
	// preferred one could not take it within the sticky wait, this one had
	// the most room.
	Switched bool
}

// Oversize says a call can never go out: it needs more of a limit than
// the whole window of every credential (OpenAI: "Request too large").
type Oversize struct {
	Kind        Kind
	Need, Limit int64
}

// Decision is what Reserve decided: a Grant, a wait, or a call too large
// for every credential.
type Decision struct {
	Grant
	// Wait, above 0, says the call waits: Release grants it once a budget
	// has room; Wait is how long that should take, for the call's
	// Credential and Limit, at the rates known now.
	Wait  time.Duration
	Limit Kind
	// TooLarge, when its Limit is above 0, says no credential can ever
	// take the call: nothing was reserved, and it waits for nothing.
	TooLarge Oversize
}

// New returns the pacer of the credentials names, each with its
// configured limits (limits[name]; missing: none) full at now.
func New(names []string, limits map[string]Limits, now time.Time, opts Options) *Pacer {
	if opts.StickyWait == 0 {
		opts.StickyWait = DefaultStickyWait
	}
	if opts.Probes <= 0 {
		opts.Probes = DefaultProbes
	}
	p := &Pacer{creds: make([]credential, len(names)), opts: opts}
	for i, name := range names {
		p.creds[i].name = name
		for k := range Kind(numKinds) {
			p.creds[i].buckets[k].configure(limits[name].perMinute(k), now)
		}
		p.creds[i].burst.start(opts.Window, now)
		if p.creds[i].known() {
			p.creds[i].burst.follow(&p.creds[i].buckets, now)
		}
	}
	return p
}

// Reserve reserves need for call id (of priority, preferring credential
// prefer): on prefer when it has room, or will within the sticky wait
// (then the call waits for it), else on the credential with the most
// room; when none has room, or when calls of the same or a higher
// priority already wait, the call waits. A call larger than every
// credential's whole window reserves nothing (TooLarge).
func (p *Pacer) Reserve(now time.Time, id string, priority Priority, prefer string, need Need) Decision {
	p.advance(now)
	if o, ok := p.tooLarge(prefer, need); ok {
		return Decision{Grant: Grant{ID: id, Credential: prefer}, TooLarge: o}
	}
	if !p.queuedAtOrAbove(priority) {
		if g, ok := p.fit(now, id, prefer, need, now); ok {
			return Decision{Grant: g}
		}
	}
	p.seq++
	w := waiter{id: id, priority: priority, seq: p.seq, since: now, prefer: prefer, need: need}
	at, _ := slices.BinarySearchFunc(p.waiting, w, func(a, b waiter) int {
		if a.priority.Rank() != b.priority.Rank() {
			return a.priority.Rank() - b.priority.Rank()
		}
		return int(a.seq) - int(b.seq)
	})
	p.waiting = slices.Insert(p.waiting, at, w)
	d := Decision{Grant: Grant{ID: id, Credential: prefer}}
	d.Credential, d.Wait, d.Limit = p.soonest(now, need, prefer)
	if c := p.credential(prefer); c != nil && !c.blocked.After(now) {
		if w, k := p.wait(c, need); w <= p.opts.StickyWait {
			d.Credential, d.Wait, d.Limit = prefer, w, k // it waits for its own key
		}
	}
	if qw, k := p.queueWait(now, at); qw > d.Wait {
		d.Wait, d.Limit = qw, k
	}
	d.Wait = max(d.Wait, time.Nanosecond)
	return d
}

// tooLarge reports whether need exceeds a limit of every credential, and
// how it exceeds prefer's (or the first credential's).
func (p *Pacer) tooLarge(prefer string, need Need) (Oversize, bool) {
	var o Oversize
	for i := range p.creds {
		c := &p.creds[i]
		k, limit, ok := c.tooLarge(need)
		if !ok {
			return Oversize{}, false
		}
		if i == 0 || c.name == prefer {
			o = Oversize{Kind: k, Need: int64(need.of(k)), Limit: int64(limit)}
		}
	}
	return o, len(p.creds) > 0
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

// fit reserves need for call id, waiting since since, on prefer when it
// has room; else, unless prefer can take it within the sticky wait of
// since, on the unblocked credential with the most room; false when none
// can take it now.
func (p *Pacer) fit(now time.Time, id, prefer string, need Need, since time.Time) (Grant, bool) {
	best, bestRoom := -1, 0.0
	for i := range p.creds {
		c := &p.creds[i]
		if _, _, never := c.tooLarge(need); never || (c.name != prefer && c.blocked.After(now)) {
			continue
		}
		if c.name == prefer {
			if p.takes(c, need) {
				best = i
				break
			}
			if w, _ := p.wait(c, need); w <= p.opts.StickyWait-now.Sub(since) {
				return Grant{}, false // it takes it soon: wait for the key that holds the session's cache
			}
			continue
		}
		if room := c.room(need); p.takes(c, need) && (best < 0 || room > bestRoom) {
			best, bestRoom = i, room
		}
	}
	if best < 0 {
		return Grant{}, false
	}
	c := &p.creds[best]
	c.reserve(now, id, need)
	return Grant{ID: id, Credential: c.name, Switched: prefer != "" && c.name != prefer}, true
}

// takes reports whether c can take need now: a cold key while it has a
// probe to spare, a known one while need fits every limit.
func (p *Pacer) takes(c *credential, need Need) bool {
	if c.cold() {
		return c.probesOut() < p.opts.Probes
	}
	return c.fits(need)
}

// wait is how long until c can take need, and the kind it waits for; a
// cold key with no probe to spare waits for its probe's headers.
func (p *Pacer) wait(c *credential, need Need) (time.Duration, Kind) {
	if c.cold() && c.probesOut() >= p.opts.Probes {
		return coldWait, ratelimit.Requests
	}
	return c.wait(need)
}

// soonest is the unblocked credential (or prefer) where need fits first
// (prefer on a tie), how long that takes and the kind it waits for.
func (p *Pacer) soonest(now time.Time, need Need, prefer string) (string, time.Duration, Kind) {
	name, wait, limit := prefer, time.Duration(-1), ratelimit.Requests
	for i := range p.creds {
		c := &p.creds[i]
		if _, _, never := c.tooLarge(need); never || (c.name != prefer && c.blocked.After(now)) {
			continue
		}
		w, k := p.wait(c, need)
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
		g, ok := p.fit(now, w.id, w.prefer, w.need, w.since)
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
	w := p.waiting[0]
	_, wait, _ := p.soonest(now, w.need, w.prefer)
	if left := w.since.Add(p.opts.StickyWait).Sub(now); left > 0 && left < wait {
		wait = left // then it may move to another key
	}
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

// Settle ends the granted call id with what it used (see
// credential.settle); false when id holds no grant.
func (p *Pacer) Settle(now time.Time, id string, used Usage) bool {
	for i := range p.creds {
		c := &p.creds[i]
		if j := c.out(id); j >= 0 {
			c.settle(now, c.recent[j], used, p.opts.Refunds)
			c.prune(now)
			return true
		}
	}
	return false
}

// Observe takes the limits a response on credential announced, its
// headers having arrived at arrived (read at now): each kind's level
// becomes what remains less the calls granted after arrived (see
// credential.observe). The first response of a cold key tells its limits
// and ends its cold start.
func (p *Pacer) Observe(now time.Time, credential string, arrived time.Time, s ratelimit.Snapshot) {
	c := p.credential(credential)
	if c == nil || s.Len() == 0 {
		return
	}
	c.observed, c.headerless = true, false
	counted := false
	for k := range Kind(numKinds) {
		if l, ok := s.Get(k); ok {
			c.observe(k, l, arrived, now)
			counted = counted || l.HasRemaining
		}
	}
	if counted {
		c.markCounted(arrived)
	}
	c.burst.follow(&c.buckets, now)
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

// Paced reports whether the pacer may hold a call: some credential has a
// limit known, or starts cold (none known, and no call answered without
// headers yet).
func (p *Pacer) Paced() bool {
	for i := range p.creds {
		if c := &p.creds[i]; c.known() || c.cold() {
			return true
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
		c := &p.creds[i]
		for k := range c.buckets {
			c.buckets[k].advance(now)
		}
		c.burst.advance(&c.buckets, now)
	}
}

// fits reports whether need fits every limit of c now.
func (c *credential) fits(need Need) bool {
	w, _ := c.wait(need)
	return w == 0
}

// room is the least share left of any of c's limits after need.
func (c *credential) room(need Need) float64 {
	room := 1.0
	for k := range c.buckets {
		room = min(room, c.buckets[k].headroom(need.of(Kind(k))))
	}
	return room
}

// wait is how long until need fits c (its windows and its burst), and
// the kind that takes longest.
func (c *credential) wait(need Need) (time.Duration, Kind) {
	longest, limit := c.burst.wait(need)
	for k := range c.buckets {
		if w := c.buckets[k].wait(need.of(Kind(k))); w > longest {
			longest, limit = w, Kind(k)
		}
	}
	return longest, limit
}
