package overload

import (
	"fmt"
	"slices"
	"time"

	"github.com/musepi/musepi/pacing"
)

// Key is what one limit governs: a provider's model.
type Key struct{ Provider, Model string }

// String is "provider/model".
func (k Key) String() string { return k.Provider + "/" + k.Model }

// Result is what the end of a call says of its provider's load.
type Result uint8

// The results.
const (
	// Neutral says nothing of load: a 429 (rate limits are pacing's), a
	// refused request, an abort, a network failure. It only frees the
	// call's place.
	Neutral Result = iota
	// Answered: the provider answered; Outcome.FirstToken says how fast.
	Answered
	// Overloaded: the provider said it has no room: a 529, a 503, a 500 in
	// overload wording, an overloaded_error inside a stream.
	Overloaded
	// TimedOut: no answer came within the caller's time-out.
	TimedOut
)

// Outcome is how a call ended.
type Outcome struct {
	Result Result
	// FirstToken is an answer's time to first token: from the request to
	// its first content (to the whole answer when not streamed). 0: not
	// measured, taken as normal.
	FirstToken time.Duration
}

// Settings tune a Limiter; the zero value gives the defaults.
type Settings struct {
	// Max is the highest the limit goes: high enough never to bind on a
	// healthy provider. 0 is DefaultMax.
	Max int
	// Initial is the limit a model starts at. Until its first overload
	// answer the limit grows by one an answer while it is used, doubling
	// every round (TCP's slow start), up to Max: a cold burst larger than
	// it waits a round or two instead of flooding a provider whose
	// capacity nobody knows yet. 0 is DefaultInitial; above Max, Max.
	Initial int
	// Backoff is the share of the calls in flight that an overload answer
	// or a time-out leaves as the limit, in (0, 1). 0 is DefaultBackoff.
	Backoff float64
	// Tolerance is how many times its baseline an answer's time to first
	// token may take and still count as normal latency (above 1). 0 is
	// DefaultTolerance.
	Tolerance float64
	// ProbeAfter is how long after a decrease the limit grows by one a
	// round before it grows by one an answer again. 0 is
	// DefaultProbeAfter.
	ProbeAfter time.Duration
	// Window is how many answers the latency baseline averages over (an
	// exponential moving average). 0 is DefaultWindow.
	Window int
	// MaxQueueWait bounds how long a retry waits for its model, or another
	// of its role's fallback chain, to come out of its cooldown when all
	// are cooling, rather than retry into one that is (a session reads
	// it: docs/retry-policy.md). 0 is DefaultMaxQueueWait; negative: the
	// retry never waits for a cooldown.
	MaxQueueWait time.Duration
	// HighPriorityFallback names the roles whose high-priority turns take
	// a fallback model at once when their model's limit is full: the first
	// of the role's fallback chain, on the same provider, whose limit has
	// room (a session reads it: docs/retry-policy.md). Other turns, and
	// other roles', wait for their model.
	HighPriorityFallback []string
	// Members is how many limiters share the provider's capacity, one per
	// node of a cluster (each keeps its own, as Envoy keeps a limit per
	// host): a model starts at Initial shared among them, and the limit's
	// growth of one a round after a decrease is shared too, so that
	// together they start and probe as one limiter does. 0 or 1: one.
	Members int
}

// The defaults of Settings.
const (
	DefaultMax        = 1000
	DefaultInitial    = 100
	DefaultBackoff    = 0.9
	DefaultTolerance  = 2.0
	DefaultProbeAfter = 3 * time.Second
	DefaultWindow     = 100
	// DefaultMaxQueueWait is two minutes: longer than the longest
	// cooldown an overload answer sets (75 s).
	DefaultMaxQueueWait = 2 * time.Minute
)

// smoothing is how much of the gradient's decrease a slow answer applies
// (Gradient2's smoothing).
const smoothing = 0.2

// warmup is how many answers the baseline takes before it judges one
// (Gradient2's warmup).
const warmup = 10

// historyLen bounds each model's history: the latest changes are kept.
const historyLen = 4096

// WithDefaults is s with every zero field at its default.
func (s Settings) WithDefaults() Settings {
	if s.Max <= 0 {
		s.Max = DefaultMax
	}
	if s.Initial <= 0 {
		s.Initial = DefaultInitial
	}
	s.Initial = min(s.Initial, s.Max)
	s.Members = max(s.Members, 1)
	if s.Backoff <= 0 || s.Backoff >= 1 {
		s.Backoff = DefaultBackoff
	}
	if s.Tolerance <= 1 {
		s.Tolerance = DefaultTolerance
	}
	if s.ProbeAfter <= 0 {
		s.ProbeAfter = DefaultProbeAfter
	}
	if s.Window <= 0 {
		s.Window = DefaultWindow
	}
	if s.MaxQueueWait == 0 {
		s.MaxQueueWait = DefaultMaxQueueWait
	}
	return s
}

// Reason is why a limit changed.
type Reason uint8

// The reasons.
const (
	// Raised: answers at normal latency.
	Raised Reason = iota
	// Overload: an overload answer.
	Overload
	// Timeout: a call timed out.
	Timeout
	// Slow: an answer slower than Tolerance times the baseline.
	Slow
)

var reasonNames = [...]string{Raised: "raised", Overload: "overload", Timeout: "timeout", Slow: "slow"}

// String is "raised", "overload", "timeout" or "slow".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Change is a limit's new value, when and why.
type Change struct {
	At     time.Time
	Limit  int
	Reason Reason
}

// Grant is a waiting call that may go now.
type Grant struct {
	ID  string
	Key Key
}

// Limiter is the concurrency limits of a runtime's models, their calls in
// flight and the calls that wait. It is not safe for concurrent use: an
// actor owns it.
type Limiter struct {
	s        Settings
	models   map[Key]*model
	inFlight map[string]call // by id
	queued   map[string]Key  // waiting calls' models, by id
}

// call is a call in flight: its model, its place in the model's sends and
// how many were in flight when it went, itself included.
type call struct {
	key      Key
	seq      uint64
	inFlight int
}

// New returns a limiter with settings s (zero fields: defaults).
func New(s Settings) *Limiter {
	return &Limiter{s: s.WithDefaults(), models: map[Key]*model{}, inFlight: map[string]call{}, queued: map[string]Key{}}
}

// Acquire asks whether call id (unique among the calls in flight and
// waiting) to key, of priority, may go now. True: it is in flight until
// Release. False: it waits until a Release grants it, or Cancel.
func (l *Limiter) Acquire(id string, key Key, priority pacing.Priority) bool {
	m := l.model(key)
	if !m.hasRoom() {
		m.wait(id, priority)
		l.queued[id] = key
		return false
	}
	l.send(id, key, m)
	return true
}

// TryAcquire puts call id to key in flight, as Acquire, only if it may
// go now: the limit has room and no call waits for it. It never queues:
// false leaves nothing behind.
func (l *Limiter) TryAcquire(id string, key Key) bool {
	m := l.model(key)
	if !m.hasRoom() {
		return false
	}
	l.send(id, key, m)
	return true
}

// HasRoom reports whether a call to key would go now: the limit has room
// and no call waits for it.
func (l *Limiter) HasRoom(key Key) bool {
	if m, ok := l.models[key]; ok {
		return m.hasRoom()
	}
	return true
}

// Release ends call id, in flight, with o at now: its limit learns from
// o, and the waiting calls that fit now go (returned in the order they
// go). Nil for an id not in flight.
func (l *Limiter) Release(now time.Time, id string, o Outcome) []Grant {
	c, ok := l.inFlight[id]
	if !ok {
		return nil
	}
	delete(l.inFlight, id)
	m := l.models[c.key]
	m.inFlight--
	m.learn(now, c, o, &l.s)
	var out []Grant
	for len(m.waiting) > 0 && m.inFlight < m.allowed() {
		w := m.waiting[0]
		m.waiting = slices.Delete(m.waiting, 0, 1)
		delete(l.queued, w.id)
		l.send(w.id, c.key, m)
		out = append(out, Grant{ID: w.id, Key: c.key})
	}
	return out
}

// Cancel forgets waiting call id (an abort); false when it does not wait.
func (l *Limiter) Cancel(id string) bool {
	key, ok := l.queued[id]
	if !ok {
		return false
	}
	delete(l.queued, id)
	m := l.models[key]
	m.waiting = slices.DeleteFunc(m.waiting, func(w waiter) bool { return w.id == id })
	return true
}

// Limit is how many calls may be in flight to key now.
func (l *Limiter) Limit(key Key) int {
	if m, ok := l.models[key]; ok {
		return m.allowed()
	}
	return max(1, l.s.Initial/l.s.Members)
}

// InFlight is how many calls to key are in flight.
func (l *Limiter) InFlight(key Key) int {
	if m, ok := l.models[key]; ok {
		return m.inFlight
	}
	return 0
}

// Waiting is how many calls to key wait, by priority: high, normal, low.
func (l *Limiter) Waiting(key Key) [3]int {
	var n [3]int
	if m, ok := l.models[key]; ok {
		for _, w := range m.waiting {
			n[w.priority.Rank()]++
		}
	}
	return n
}

// History is key's limit over time: every change of it, oldest first
// (the latest 4,096), for reports.
func (l *Limiter) History(key Key) []Change {
	if m, ok := l.models[key]; ok {
		return slices.Clone(m.history)
	}
	return nil
}

// model is key's limit, made on first use.
func (l *Limiter) model(key Key) *model {
	m := l.models[key]
	if m == nil {
		m = &model{limit: float64(max(1, l.s.Initial/l.s.Members))}
		l.models[key] = m
	}
	return m
}

// send puts call id to key in flight.
func (l *Limiter) send(id string, key Key, m *model) {
	m.seq++
	m.inFlight++
	l.inFlight[id] = call{key: key, seq: m.seq, inFlight: m.inFlight}
}

// model is one model's limit and what it is learnt from.
type model struct {
	limit    float64 // at least 1; its integer part is how many calls may be in flight
	inFlight int
	seq      uint64 // calls sent so far
	// cut is the seq of the last call sent before the last decrease, at
	// cutAt: calls up to it belong to the round that decrease ended.
	cut      uint64
	cutAt    time.Time
	baseline float64 // time to first token, ns: its moving average
	answers  int     // answers that measured it
	waiting  []waiter
	arrivals uint64
	history  []Change
}

// waiter is a call that waits for a place.
type waiter struct {
	id       string
	priority pacing.Priority
	arrival  uint64
}

// allowed is how many calls may be in flight.
func (m *model) allowed() int { return int(m.limit) }

// hasRoom reports whether a call may go now: room in the limit, and no
// call waiting before it.
func (m *model) hasRoom() bool { return len(m.waiting) == 0 && m.inFlight < m.allowed() }

// wait queues call id in release order: priority, then arrival.
func (m *model) wait(id string, priority pacing.Priority) {
	m.arrivals++
	w := waiter{id: id, priority: priority, arrival: m.arrivals}
	at, _ := slices.BinarySearchFunc(m.waiting, w, func(a, b waiter) int {
		if a.priority.Rank() != b.priority.Rank() {
			return a.priority.Rank() - b.priority.Rank()
		}
		return int(a.arrival) - int(b.arrival)
	})
	m.waiting = slices.Insert(m.waiting, at, w)
}

// learn adjusts the limit to call c's outcome o at now.
func (m *model) learn(now time.Time, c call, o Outcome, s *Settings) {
	switch o.Result {
	case Overloaded:
		m.decrease(now, c, s.Backoff, Overload)
	case TimedOut:
		m.decrease(now, c, s.Backoff, Timeout)
	case Answered:
		if g := m.gradient(o.FirstToken, s); g < 1 {
			m.decrease(now, c, 1-smoothing*(1-g), Slow)
			return
		}
		m.raise(now, c, s)
	}
}

// decrease lowers the limit to share of the calls in flight when c went.
// A call sent after the last decrease starts a round; one sent before it
// belongs to the round that decrease started, and only brings the limit
// down to its own level.
func (m *model) decrease(now time.Time, c call, share float64, why Reason) {
	to := max(1, share*float64(c.inFlight))
	if c.seq <= m.cut {
		to = min(to, m.limit)
	} else {
		m.cut, m.cutAt = m.seq, now
	}
	m.set(now, to, why)
}

// raise raises the limit after an answer at normal latency to call c: by
// one a round (1/limit) within ProbeAfter of the last decrease, shared
// among the Members, by one after it; not when fewer than half the limit
// were in flight as c went.
func (m *model) raise(now time.Time, c call, s *Settings) {
	if 2*c.inFlight < m.allowed() {
		return
	}
	step := 1.0
	if !m.cutAt.IsZero() && now.Sub(m.cutAt) < s.ProbeAfter {
		step = 1 / (m.limit * float64(s.Members))
	}
	m.set(now, min(float64(s.Max), m.limit+step), Raised)
}

// set makes to the limit, recording a change of its integer part.
func (m *model) set(now time.Time, to float64, why Reason) {
	before := m.allowed()
	m.limit = to
	if m.allowed() == before {
		return
	}
	if len(m.history) == historyLen {
		m.history = slices.Delete(m.history, 0, 1)
	}
	m.history = append(m.history, Change{At: now, Limit: m.allowed(), Reason: why})
}

// gradient judges an answer's time to first token against the baseline:
// Tolerance × baseline / sample, clamped to [0.5, 1] (1: normal latency;
// also while the baseline warms up, or unmeasured); then the baseline
// takes the sample.
func (m *model) gradient(sample time.Duration, s *Settings) float64 {
	if sample <= 0 {
		return 1
	}
	x := float64(sample)
	g := 1.0
	if m.answers >= warmup {
		g = min(1, max(0.5, s.Tolerance*m.baseline/x))
	}
	m.answers++
	if m.answers == 1 {
		m.baseline = x
	} else {
		m.baseline += (x - m.baseline) * 2 / float64(s.Window+1)
	}
	return g
}
