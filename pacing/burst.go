package pacing

import (
	"math"
	"time"
)

// burst paces how much of a key's window goes out at once. A provider may
// enforce a per-minute limit over a shorter window (OpenAI: "60,000
// requests/minute may be enforced as 1,000 requests/second"; Anthropic:
// "60 requests per minute may be enforced as 1 request per second"), and
// its headers still announce the minute. So a key starts slow: at most a
// second's worth (limit/60) goes out at once, and the share grows by a
// quarter every second that no call is refused, up to the whole window
// (in about 18 s): a server that enforces the minute lends its first burst
// a few seconds late, one that enforces a shorter window refuses at most a
// quarter of that window once. A refusal (429) halves the share, once for
// the calls refused together, and stops its growth: the key has found its
// window.
type burst struct {
	share   float64          // of each limit that may go at once
	buckets [numKinds]bucket // capacity share × limit, refilled at the limit's pace
	grown   time.Time        // when share last grew, or was cut
	settled bool             // a refusal set the share: it grows no more
}

// minBurstShare is the smallest share: a second's worth of a minute.
const minBurstShare = 1.0 / 60

// growEvery is how often the share grows, by growBy, while nothing is
// refused.
const (
	growEvery = time.Second
	growBy    = 1.25
)

// start sets the share for a provider known to enforce window (0:
// unknown: a second's worth, growing).
func (b *burst) start(window time.Duration, now time.Time) {
	b.share, b.grown = minBurstShare, now
	if window > 0 {
		b.share, b.settled = math.Min(1, math.Max(minBurstShare, window.Seconds()/60)), true
	}
}

// follow keeps the burst buckets in step with the key's limits (main):
// a kind whose limit became known starts at the current share, full.
func (b *burst) follow(main *[numKinds]bucket, now time.Time) {
	for k := range main {
		m, s := &main[k], &b.buckets[k]
		if !m.known() {
			continue
		}
		capacity := math.Max(b.share*m.limit, 1)
		if !s.known() {
			s.level, s.at = capacity, now
		}
		s.limit, s.rate = capacity, m.limit/60
		s.level = math.Min(s.level, capacity)
	}
}

// advance grows the share when growEvery has passed without a refusal
// (the room added goes into the buckets at once), and refills them.
func (b *burst) advance(main *[numKinds]bucket, now time.Time) {
	if !b.settled && b.share < 1 && now.Sub(b.grown) >= growEvery {
		b.share, b.grown = math.Min(1, b.share*growBy), now
		for k := range b.buckets {
			if s := &b.buckets[k]; s.known() {
				s.advance(now)
				added := math.Max(b.share*main[k].limit, 1) - s.limit
				s.limit, s.level = s.limit+added, s.level+added
			}
		}
	}
	for k := range b.buckets {
		b.buckets[k].advance(now)
	}
}

// refused takes a refusal at now: the window the server enforces is
// empty, so the burst is too (the headers that announce the minute do not
// show it: without, the burst lent what a refused call did not take to the
// next calls, and a 10-second window refused a third of a storm's
// requests); and the share halves, and stops growing. The calls refused
// within growEvery of a cut were sent before it took effect, and cut the
// share no more.
func (b *burst) refused(main *[numKinds]bucket, now time.Time) {
	for k := range b.buckets {
		b.buckets[k].advance(now)
		b.buckets[k].level = math.Min(b.buckets[k].level, 0)
	}
	if b.settled && now.Sub(b.grown) < growEvery {
		return
	}
	b.grown = now
	b.share, b.settled = math.Max(minBurstShare, b.share/2), true
	for k := range b.buckets {
		if s := &b.buckets[k]; s.known() {
			s.limit = math.Max(b.share*main[k].limit, 1)
			s.level = math.Min(s.level, s.limit)
		}
	}
}

// wait is how long until need fits the burst (0: it does now).
func (b *burst) wait(need Need) (time.Duration, Kind) {
	var longest time.Duration
	var limit Kind
	for k := range b.buckets {
		if w := b.buckets[k].wait(need.of(Kind(k))); w > longest {
			longest, limit = w, Kind(k)
		}
	}
	return longest, limit
}
