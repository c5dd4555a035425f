package pacing

import (
	"math"
	"time"

	"github.com/musepi/musepi/provider/ratelimit"
)

// bucket is one kind of one credential's budget: a token bucket.
type bucket struct {
	limit float64   // capacity (0: no limit known; the bucket never constrains)
	rate  float64   // refill per second
	level float64   // available at at
	at    time.Time // when level was last brought up to date
}

// known reports whether the bucket has a limit.
func (b *bucket) known() bool { return b.limit > 0 }

// configure makes the bucket a full one of perMinute per minute.
func (b *bucket) configure(perMinute int64, now time.Time) {
	if perMinute <= 0 {
		return
	}
	b.limit, b.rate, b.level, b.at = float64(perMinute), float64(perMinute)/60, float64(perMinute), now
}

// advance refills the bucket up to now.
func (b *bucket) advance(now time.Time) {
	if dt := now.Sub(b.at); dt > 0 {
		b.level = math.Min(b.limit, b.level+b.rate*dt.Seconds())
		b.at = now
	}
}

// capped is need, at most the bucket's capacity: a call larger than the
// whole window goes once the bucket is full instead of never.
func (b *bucket) capped(need float64) float64 { return math.Min(need, b.limit) }

// wait is how long until need fits (0: it fits now); the bucket is up to
// date.
func (b *bucket) wait(need float64) time.Duration {
	if !b.known() {
		return 0
	}
	short := b.capped(need) - b.level
	if short <= 0 {
		return 0
	}
	if b.rate <= 0 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Ceil(short / b.rate * float64(time.Second)))
}

// headroom is the share of the capacity left after need (1: no limit).
func (b *bucket) headroom(need float64) float64 {
	if !b.known() {
		return 1
	}
	return (b.level - b.capped(need)) / b.limit
}

// take spends need (the bucket may go below zero: a reconciliation or a
// header said more was spent than reserved).
func (b *bucket) take(need float64) {
	if b.known() {
		b.level -= b.capped(need)
	}
}

// give returns n to the bucket, up to its capacity.
func (b *bucket) give(n float64) {
	if b.known() {
		b.level = math.Min(b.limit, b.level+n)
	}
}

// observeLimit takes the limit a response announced, if any: a new limit
// refills at that limit per minute until a reset says otherwise.
func (b *bucket) observeLimit(l ratelimit.Limit) {
	if l.HasLimit {
		if float64(l.Limit) != b.limit {
			b.rate = float64(l.Limit) / 60
		}
		b.limit = float64(l.Limit)
	}
}
