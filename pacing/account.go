package pacing

import (
	"math"
	"slices"
	"time"

	"github.com/musepi/musepi/provider/ratelimit"
)

// credential is one credential's budget, and the calls granted on it.
type credential struct {
	name    string
	buckets [numKinds]bucket
	blocked time.Time // until when the key refuses (a usage limit)
	// recent are the calls granted on it, in grant order: those out, and
	// those settled less than recentFor ago, which a response read late may
	// not have counted yet.
	recent []*grant
	// burst paces how much of the key's windows goes out at once.
	burst burst
	// held is when the key's last refusal said calls may go again
	// (Usage.RetryAfter); at is when its buckets were last brought up to
	// date.
	held, at time.Time
	// observed says a response announced some limit of the key;
	// headerless that a call was answered without any, before any did: a
	// key with no limit known is then never held (see cold).
	observed, headerless bool
}

// recentFor is how long a settled grant is kept: a response is read as
// its headers arrive, well within it.
const recentFor = time.Minute

// grant is a call granted on a credential.
type grant struct {
	id   string
	at   time.Time // when it was granted
	need Need
	// charge is what it takes from each budget: its need at the grant,
	// what it used (or was charged) once settled.
	charge  [numKinds]float64
	settled bool
	// counted says a response that arrived after its grant set the budget:
	// the server's remaining holds the call, so its settle gives nothing
	// back (a refund shows in later responses).
	counted bool
	probe   bool      // it went out while no limit of the key was known
	heard   time.Time // when its response's headers arrived (zero: not yet)
}

// The accounting rule, once: a key's level after a response is what the
// response says remains, less only what the calls granted after the
// server counted the response's call take: the server counts a call as it
// arrives, after the calls sent before it, so the calls granted before
// that call are in its count, and those granted after it may not be,
// though granted before the response came back (they may still be on
// their way: taking them for counted once ran a storm's keys 4.4 % of
// their requests over the limit). The level then refills at the response's rate from the
// moment its headers arrived, never faster than its limit allows (a
// per-minute limit L refills at most L/60 a second). So responses read in
// any order leave the level where the server's count puts it, and a
// response read shortly before its reset does not make a runaway rate.
//
// count is what a response's count holds: its own call (self), the calls
// granted before self's release, and those whose responses came back
// before self's (the server answered them first); without self (a call
// the budget does not know), the calls granted by the response's arrival.
// Other calls of self's release, and later ones, may reach the server
// after it: not counted until their own responses say so (taking them all
// for not counted, a release of hundreds left a key idle for seconds).
type count struct {
	self    *grant
	arrived time.Time
}

// holds reports whether the count holds grant g.
func (n count) holds(g *grant) bool {
	if n.self == nil {
		return !g.at.After(n.arrived)
	}
	return g == n.self || g.at.Before(n.self.at) || (!g.heard.IsZero() && g.heard.Before(n.self.heard))
}

// observe applies it to kind k's limit l, announced by a response whose
// count is n, read at now.
func (c *credential) observe(k Kind, l ratelimit.Limit, n count, now time.Time) {
	arrived := n.arrived
	b := &c.buckets[k]
	b.observeLimit(l)
	if !l.HasRemaining {
		return
	}
	if !b.known() { // a remaining count with no limit: the window holds at least that much
		b.limit, b.rate = float64(max(l.Remaining, 1)), float64(max(l.Remaining, 1))/60
	}
	b.rate = b.limit / 60
	if short := b.limit - float64(l.Remaining); short > 0 && l.Reset.After(arrived) {
		b.rate = math.Min(b.rate, short/l.Reset.Sub(arrived).Seconds())
	}
	// From what remained as the headers arrived, replay the calls granted
	// since the count, each as the bucket stood then (in grant order, which
	// is time order), and refill to now.
	b.level, b.at = math.Min(b.limit, float64(l.Remaining)), arrived
	for _, g := range c.recent {
		if !n.holds(g) {
			b.advance(g.at)
			b.level -= g.charge[k]
		}
	}
	b.advance(now)
}

// markCounted marks the calls n holds as counted by the server.
func (c *credential) markCounted(n count) {
	for _, g := range c.recent {
		if n.holds(g) {
			g.counted = true
		}
	}
}

// reserve takes need from every limit of c for call id, granted at now.
func (c *credential) reserve(now time.Time, id string, need Need) {
	g := &grant{id: id, at: now, need: need, probe: c.cold()}
	for k := range c.buckets {
		g.charge[k] = need.of(Kind(k))
		c.buckets[k].take(g.charge[k])
		c.burst.buckets[k].take(g.charge[k])
	}
	c.recent = append(c.recent, g)
}

// settle ends grant g with what it used: a grant the server has not
// counted gives back what it took and was not charged (or takes what it
// was charged beyond). refunds says the server gives back unused output
// of a bounded call as it ends (Anthropic): a counted grant gets that
// back too, for no later response may come to say so while the key
// waits; without, the server keeps the bound (OpenAI).
func (c *credential) settle(now time.Time, g *grant, used Usage, refunds bool) {
	g.settled = true
	if used.Refused {
		c.burst.refused(&c.buckets, now)
		if until := now.Add(used.RetryAfter); until.After(c.held) {
			c.held = until
		}
	}
	if g.probe && !c.observed {
		c.headerless = used.Sent // answered without headers; a call never sent says nothing
	}
	answered := used.Input > 0 || used.Output > 0 // a refusal reports no usage, and is charged its request only
	refund := 0.0
	if answered && g.need.Bounded && refunds {
		refund = math.Max(float64(g.need.Output-used.Output), 0)
	}
	if answered && g.need.Bounded && !refunds {
		used.Output = max(used.Output, g.need.Output) // the bound is kept; the input is what the server counted
	}
	for k := range c.buckets {
		charged := used.of(Kind(k))
		// The burst is the key's own pacing of what goes at once: it takes
		// back what the call was not charged, counted or not (an input
		// estimate above the server's count once slowed a key by a fifth).
		back := g.charge[k] - charged
		if !used.Refused { // a refusal emptied the burst
			c.burst.buckets[k].advance(now)
			c.burst.buckets[k].give(back)
		}
		if g.counted {
			back = 0
			if Kind(k) == ratelimit.Tokens || Kind(k) == ratelimit.OutputTokens {
				back = refund
			}
		}
		c.buckets[k].advance(now)
		c.buckets[k].give(back)
		g.charge[k] = charged
	}
}

// prune drops the settled grants older than recentFor.
func (c *credential) prune(now time.Time) {
	c.recent = slices.DeleteFunc(c.recent, func(g *grant) bool { return g.settled && now.Sub(g.at) > recentFor })
}

// granted is call id's latest grant, settled or not (nil: none kept).
func (c *credential) granted(id string) *grant {
	for i := len(c.recent) - 1; i >= 0 && id != ""; i-- {
		if g := c.recent[i]; g.id == id {
			return g
		}
	}
	return nil
}

// out is the index in recent of call id's grant not yet settled (-1:
// none).
func (c *credential) out(id string) int {
	for i := len(c.recent) - 1; i >= 0; i-- {
		if g := c.recent[i]; g.id == id && !g.settled {
			return i
		}
	}
	return -1
}

// known reports whether some limit of c is known.
func (c *credential) known() bool {
	for k := range c.buckets {
		if c.buckets[k].known() {
			return true
		}
	}
	return false
}

// cold reports whether c starts cold: no limit of it known, configured or
// announced, and no call answered without headers yet. A cold key lets
// Probes calls out and holds the rest until a response tells its limits.
func (c *credential) cold() bool { return !c.known() && !c.headerless }

// probesOut counts the probes out.
func (c *credential) probesOut() int {
	n := 0
	for _, g := range c.recent {
		if g.probe && !g.settled {
			n++
		}
	}
	return n
}

// tooLarge is the kind of c's limits that need exceeds whole, and that
// limit (false: it fits some day).
func (c *credential) tooLarge(need Need) (Kind, float64, bool) {
	for k := range c.buckets {
		if b := &c.buckets[k]; b.known() && need.of(Kind(k)) > b.limit {
			return Kind(k), b.limit, true
		}
	}
	return 0, 0, false
}
