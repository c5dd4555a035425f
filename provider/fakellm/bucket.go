package fakellm

import (
	"math"
	"time"
)

// A token bucket per limit, kept per API key and model.
//
// Anthropic, https://platform.claude.com/docs/en/api/rate-limits: "We use
// the token bucket algorithm to do rate limiting. This means that your
// capacity is continuously replenished up to your maximum limit, rather
// than being reset at fixed intervals."
//
// Both providers may enforce a per-minute limit over a shorter window.
// OpenAI, https://help.openai.com/en/articles/6891753: "Rate limits can be
// quantized, meaning they are enforced over shorter periods of time (e.g.
// 60,000 requests/minute may be enforced as 1,000 requests/second)."
// Anthropic, same page as above: "You may hit rate limits over shorter
// time intervals. For instance, a rate of 60 requests per minute (RPM) may
// be enforced as 1 request per second." A bucket with a window w holds at
// most limit·w/60 (its burst), refilled at the same limit/60 per second;
// it also keeps the minute's level, which the headers report (they give
// the per-minute limit, whatever the window).

// bucket is a token bucket of a per-minute limit, enforced over a window.
type bucket struct {
	limit  float64 // per minute: refills limit/60 a second; the headers' limit
	burst  float64 // what the window lets through at once: limit·w/60 (limit without a window)
	level  float64 // what the window holds (enforced); below 0 when in debt
	minute float64 // what the minute holds (reported)
	at     time.Time
}

// newBucket is a full bucket of limit a minute enforced over window (0 or
// a minute and more: the minute); nil for a limit of 0.
func newBucket(limit int64, window time.Duration, now time.Time) *bucket {
	if limit <= 0 {
		return nil
	}
	l := float64(limit)
	burst := l
	if window > 0 && window < time.Minute {
		burst = l * window.Seconds() / 60
	}
	return &bucket{limit: l, burst: burst, level: burst, minute: l, at: now}
}

// rate is the refill in units per second.
func (b *bucket) rate() float64 { return b.limit / 60 }

// refill adds what flowed in since the last refill, up to the window's
// and the minute's capacity.
func (b *bucket) refill(now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		in := d.Seconds() * b.rate()
		b.level = min(b.burst, b.level+in)
		b.minute = min(b.limit, b.minute+in)
		b.at = now
	}
}

// remaining is what the minute holds, in whole units (what the headers
// report).
func (b *bucket) remaining() int64 { return int64(max(0, math.Floor(b.minute+1e-6))) }

// needs is what the window must hold for a charge of n to pass: n, or
// when n is more than the window ever holds, a full window (the charge
// then leaves the bucket in debt, so the per-minute rate still holds).
func (b *bucket) needs(n float64) float64 { return min(n, b.burst) }

// until is how long the window takes to let a charge of n through, to the
// microsecond (0 when it does now).
func (b *bucket) until(n float64) time.Duration {
	need := b.needs(n)
	if b.level >= need-1e-9 {
		return 0
	}
	us := math.Round((need - b.level) / b.rate() * 1e6)
	return time.Duration(us) * time.Microsecond
}

// untilFull is how long the minute takes to be full again (the headers'
// reset).
func (b *bucket) untilFull() time.Duration {
	if b.minute >= b.limit {
		return 0
	}
	us := math.Round((b.limit - b.minute) / b.rate() * 1e6)
	return time.Duration(us) * time.Microsecond
}

// add puts n back (n > 0, up to the capacities) or takes -n more (n < 0).
func (b *bucket) add(n float64) {
	b.level = min(b.burst, b.level+n)
	b.minute = min(b.limit, b.minute+n)
}

// owe takes n from a bucket that could not let a request through: the
// refused request counts, down to one window's worth of debt at most (a
// request counts for one window).
func (b *bucket) owe(n float64) {
	b.level = max(-b.burst, b.level-n)
	b.minute = max(-b.burst, b.minute-n)
}

// limitState is the buckets of one API key and model (nil: no limit of
// that kind).
type limitState struct {
	requests *bucket // RPM
	tokens   *bucket // TPM: OpenAI's tokens; Anthropic's total (input + output)
	input    *bucket // ITPM (Anthropic)
	output   *bucket // OTPM (Anthropic)
}

// newLimitState is the full buckets of l.
func newLimitState(l *Limit, now time.Time) *limitState {
	w := l.window()
	return &limitState{requests: newBucket(l.RPM, w, now), tokens: newBucket(l.TPM, w, now),
		input: newBucket(l.ITPM, w, now), output: newBucket(l.OTPM, w, now)}
}

// all is the state's buckets, nil ones included.
func (st *limitState) all() []*bucket { return []*bucket{st.requests, st.tokens, st.input, st.output} }

// refill refills every bucket to now.
func (st *limitState) refill(now time.Time) {
	for _, b := range st.all() {
		if b != nil {
			b.refill(now)
		}
	}
}

// charge is what a request takes from one bucket at admission.
type charge struct {
	kind string // LimitRequests, LimitTokens, LimitInputTokens or LimitOutputTokens
	b    *bucket
	n    float64
}

// overLimit is a bucket that cannot take a request.
type overLimit struct {
	charge
	wait time.Duration // until the request fits; 0 when never (larger than the limit)
}

// admit takes every charge, or nothing and reports the bucket that cannot
// take its charge: the first one larger than its per-minute limit, else
// the one with the longest wait.
func admit(cs []charge) *overLimit {
	var worst *overLimit
	for _, c := range cs {
		if c.n > c.b.limit {
			return &overLimit{charge: c}
		}
		if w := c.b.until(c.n); w > 0 && (worst == nil || w > worst.wait) {
			worst = &overLimit{charge: c, wait: w}
		}
	}
	if worst != nil {
		return worst
	}
	for _, c := range cs {
		c.b.add(-c.n)
	}
	return nil
}

// waitFor is how long until every charge fits.
func waitFor(cs []charge) time.Duration {
	var w time.Duration
	for _, c := range cs {
		w = max(w, c.b.until(c.n))
	}
	return w
}
