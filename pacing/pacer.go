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
	// queued is the needs of the waiting calls, by rank and the key they
	// prefer: a key others wait for, even behind, has no room to lend.
	queued [3][]([numKinds]float64)
	seq    uint64 // arrivals so far
	opts   Options
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
	prefer   string // its credential, kept when it fits soon enough
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
	for r := range p.queued {
		p.queued[r] = make([][numKinds]float64, len(names))
	}
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
// prefer): on prefer when it has room and no call before it waits for
// prefer; else the call waits for prefer while waiting there costs at
// most the sticky wait more than on another key, and moves to the key
// with the most room otherwise (see place). A call larger than every
// credential's whole window reserves nothing (TooLarge).
func (p *Pacer) Reserve(now time.Time, id string, priority Priority, prefer string, need Need) Decision {
	p.advance(now)
	if o, ok := p.tooLarge(prefer, need); ok {
		return Decision{Grant: Grant{ID: id, Credential: prefer}, TooLarge: o}
	}
	w := waiter{id: id, priority: priority, seq: p.seq + 1, prefer: prefer, need: need}
	at, _ := slices.BinarySearchFunc(p.waiting, w, func(a, b waiter) int {
		if a.priority.Rank() != b.priority.Rank() {
			return a.priority.Rank() - b.priority.Rank()
		}
		return int(a.seq) - int(b.seq)
	})
	q := p.newAhead()
	for _, before := range p.waiting[:at] {
		if q.full() {
			break
		}
		pl := p.place(now, before.prefer, before.priority, before.need, q)
		q.hold(pl, before.need) // one that goes now goes at the next release
	}
	pl := p.place(now, prefer, priority, need, q)
	if pl.now {
		return Decision{Grant: p.grant(now, id, prefer, pl.key, need)}
	}
	p.seq++
	p.waiting = slices.Insert(p.waiting, at, w)
	p.queue(w, 1)
	d := Decision{Grant: Grant{ID: id, Credential: prefer}, Wait: pl.wait, Limit: pl.limit}
	if pl.key >= 0 {
		d.Credential = p.creds[pl.key].name
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

// ahead is what the waiting calls before one hold, as a pass over the
// queue reaches it: the keys they wait for, with the needs they put on
// each, and whether one of them takes whichever key frees first (then no
// later call passes it).
type ahead struct {
	load    []([numKinds]float64)
	held    []bool
	nheld   int
	any     bool
	waiting *[3][]([numKinds]float64) // the pacer's queued
}

// newAhead starts a pass over the waiting calls.
func (p *Pacer) newAhead() *ahead {
	return &ahead{load: make([][numKinds]float64, len(p.creds)), held: make([]bool, len(p.creds)), waiting: &p.queued}
}

// full reports whether the calls passed hold every key: no later call
// goes now.
func (q *ahead) full() bool { return q.any || q.nheld == len(q.held) }

// queue adds (sign 1) or removes (-1) waiting call w's need on the key
// it prefers.
func (p *Pacer) queue(w waiter, sign float64) {
	i := p.index(w.prefer)
	if i < 0 {
		return
	}
	for k := range Kind(numKinds) {
		p.queued[w.priority.Rank()][i][k] += sign * w.need.of(k)
	}
}

// waitingFor is the needs of the calls of priority or a more urgent one
// that wait for key i.
func (q *ahead) waitingFor(i int, priority Priority) (sum [numKinds]float64) {
	for r := 0; r <= priority.Rank(); r++ {
		for k := range sum {
			sum[k] += q.waiting[r][i][k]
		}
	}
	return sum
}

// index is the index of credential name (-1: none).
func (p *Pacer) index(name string) int {
	return slices.IndexFunc(p.creds, func(c credential) bool { return c.name == name })
}

// hold records a call placed at pl, which waits (or goes at the next
// release) with need.
func (q *ahead) hold(pl placement, need Need) {
	if pl.holds < 0 {
		q.any = true
		return
	}
	if !q.held[pl.holds] {
		q.held[pl.holds] = true
		q.nheld++
	}
	for k := range Kind(numKinds) {
		q.load[pl.holds][k] += need.of(k)
	}
}

// placement is where a call goes, or waits.
type placement struct {
	key   int  // the credential it goes on, or should go on first (-1: none usable)
	holds int  // the credential it keeps later calls off (-1: every one)
	now   bool // it goes on key now
	wait  time.Duration
	limit Kind // the kind it waits for
}

// goesOn is the placement of a call that goes on key i now.
func goesOn(i int) placement { return placement{key: i, holds: i, now: true} }

// place decides where a call of priority preferring prefer with need
// goes, after the calls q holds. It goes on prefer when prefer takes it
// now and no call before it waits for prefer. Else it waits for prefer
// (keeping the session's prompt cache: providers cache prompt prefixes
// per organization), unless another key would take it more than the
// sticky wait sooner, after the calls of its priority or a more urgent
// one that wait for that key; then it moves there as soon as that key
// takes it and no such call waits for it. A call with no usable key of
// its own goes on the key with the most room, or waits for whichever
// frees first.
func (p *Pacer) place(now time.Time, prefer string, priority Priority, need Need, q *ahead) placement {
	pi := p.index(prefer)
	if pi >= 0 && !p.usable(now, pi, prefer, need) {
		pi = -1
	}
	stay := placement{key: pi, holds: pi, wait: time.Duration(math.MaxInt64)}
	if pi >= 0 {
		if !q.any && !q.held[pi] && p.takes(&p.creds[pi], need) {
			return goesOn(pi)
		}
		stay.wait, stay.limit = p.waitAfter(pi, need, q.load[pi], q.held[pi])
	}
	soonest := placement{key: -1, holds: -1, wait: time.Duration(math.MaxInt64)}
	best, bestRoom := -1, 0.0
	for i := range p.creds {
		if i == pi || !p.usable(now, i, prefer, need) {
			continue
		}
		// A call with a key of its own moves only to a key no call of its
		// rank or above waits for; one without goes first come first served.
		others, queued := q.load[i], q.held[i]
		if pi >= 0 {
			others = q.waitingFor(i, priority)
			queued = others != [numKinds]float64{}
		}
		if w, k := p.waitAfter(i, need, others, queued); w < soonest.wait {
			soonest.key, soonest.wait, soonest.limit = i, w, k
		}
		c := &p.creds[i]
		if room := c.room(need); !q.any && !queued && p.takes(c, need) && (best < 0 || room > bestRoom) {
			best, bestRoom = i, room
		}
	}
	switch {
	case soonest.key < 0 && pi < 0: // every key blocked, none the session's: wait for the first to clear
		return placement{key: -1, holds: -1, wait: p.firstUnblocked(now)}
	case soonest.key < 0 || (pi >= 0 && stay.wait-soonest.wait <= p.opts.StickyWait):
		return stay
	case best >= 0:
		return goesOn(best)
	case pi >= 0: // it keeps its own key until the other takes it
		soonest.holds = pi
	}
	return soonest
}

// usable reports whether credential i may take a call preferring prefer
// with need some day: not too large for it, and not blocked (unless it is
// prefer, the one the session holds).
func (p *Pacer) usable(now time.Time, i int, prefer string, need Need) bool {
	c := &p.creds[i]
	if _, _, never := c.tooLarge(need); never {
		return false
	}
	return c.name == prefer || !c.blocked.After(now)
}

// firstUnblocked is how long until the first blocked credential clears.
func (p *Pacer) firstUnblocked(now time.Time) time.Duration {
	first := time.Duration(math.MaxInt64)
	for i := range p.creds {
		first = min(first, p.creds[i].blocked.Sub(now))
	}
	return max(first, time.Millisecond)
}

// waitAfter is how long until credential i takes need, after load when
// calls wait for it before (behind), and the kind it waits for.
func (p *Pacer) waitAfter(i int, need Need, load [numKinds]float64, behind bool) (time.Duration, Kind) {
	c := &p.creds[i]
	longest, limit := p.wait(c, need)
	if !behind {
		return longest, limit
	}
	if c.cold() {
		return max(longest, coldWait), ratelimit.Requests
	}
	for k := range c.buckets {
		b := &c.buckets[k]
		if short := load[k] + need.of(Kind(k)) - b.level; b.known() && short > 0 && b.rate > 0 {
			if w := time.Duration(math.Ceil(short / b.rate * float64(time.Second))); w > longest {
				longest, limit = w, Kind(k)
			}
		}
	}
	return longest, limit
}

// grant reserves need for call id on credential i.
func (p *Pacer) grant(now time.Time, id, prefer string, i int, need Need) Grant {
	c := &p.creds[i]
	c.reserve(now, id, need)
	return Grant{ID: id, Credential: c.name, Switched: prefer != "" && c.name != prefer}
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

// Release grants the waiting calls that go now (see place), in priority
// order, then arrival: a call that waits for its key holds that key, so
// that no later call passes it there; one that waits for whichever key
// frees first holds them all.
func (p *Pacer) Release(now time.Time) []Grant {
	p.advance(now)
	var out []Grant
	q := p.newAhead()
	for i := 0; i < len(p.waiting) && !q.full(); {
		w := p.waiting[i]
		pl := p.place(now, w.prefer, w.priority, w.need, q)
		if !pl.now {
			q.hold(pl, w.need)
			i++
			continue
		}
		p.queue(w, -1)
		out = append(out, p.grant(now, w.id, w.prefer, pl.key, w.need))
		p.waiting = slices.Delete(p.waiting, i, i+1)
	}
	return out
}

// NextRelease is when the next waiting call should go (false: none
// waits): the soonest of the waits of the calls a pass reaches.
func (p *Pacer) NextRelease(now time.Time) (time.Time, bool) {
	if len(p.waiting) == 0 {
		return time.Time{}, false
	}
	p.advance(now)
	q := p.newAhead()
	soonest := time.Duration(math.MaxInt64)
	for _, w := range p.waiting {
		if q.full() {
			break
		}
		pl := p.place(now, w.prefer, w.priority, w.need, q)
		soonest = min(soonest, pl.wait)
		q.hold(pl, w.need)
	}
	return now.Add(max(soonest, time.Millisecond)), true
}

// Cancel forgets the waiting call id; false when it does not wait.
func (p *Pacer) Cancel(id string) bool {
	i := slices.IndexFunc(p.waiting, func(w waiter) bool { return w.id == id })
	if i < 0 {
		return false
	}
	p.queue(p.waiting[i], -1)
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

// Observe takes the limits a response on credential announced to call
// id ("": a call it does not know), its headers having arrived at arrived
// (read at now): each kind's level becomes what remains less the calls
// granted after id's (after arrived, without id's grant: see
// credential.observe). The first response of a cold key tells its limits
// and ends its cold start.
func (p *Pacer) Observe(now time.Time, credential, id string, arrived time.Time, s ratelimit.Snapshot) {
	c := p.credential(credential)
	if c == nil || s.Len() == 0 {
		return
	}
	c.observed, c.headerless = true, false
	n := count{self: c.granted(id), arrived: arrived}
	switch {
	case n.self != nil && n.self.at.After(arrived):
		n.self = nil
	case n.self != nil && n.self.heard.IsZero():
		n.self.heard = arrived
	}
	told := false
	for k := range Kind(numKinds) {
		if l, ok := s.Get(k); ok {
			c.observe(k, l, n, now)
			told = told || l.HasRemaining
		}
	}
	if told {
		c.markCounted(n)
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
		c.at = now
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

// wait is how long until need fits c (its windows, its burst and its
// last refusal's hint), and the kind that takes longest.
func (c *credential) wait(need Need) (time.Duration, Kind) {
	longest, limit := c.burst.wait(need)
	if held := c.held.Sub(c.at); held > longest {
		longest, limit = held, ratelimit.Requests
	}
	for k := range c.buckets {
		if w := c.buckets[k].wait(need.of(Kind(k))); w > longest {
			longest, limit = w, Kind(k)
		}
	}
	return longest, limit
}
