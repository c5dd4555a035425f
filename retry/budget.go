package retry

import (
	"container/heap"
	"fmt"
	"math"
	"time"
)

// BudgetSettings is the `retry.budget` group: a per-provider retry budget,
// gRPC's retry throttling token bucket (gRFC A6) adapted so that a retry is
// delayed, never dropped. The bucket starts full at MaxTokens; each failed
// request to the provider costs one token and each success refunds
// TokenRatio. While tokens > MaxTokens/2 retries go out at their backoff
// time. Below that the provider is considered down: retries are held, and
// go out one per ProbeInterval (the probes that notice recovery), each
// success while held releasing the next held retry at once. When tokens
// climb back over half, every held retry is released, spread evenly over
// ReleaseWindow. A prompt's first attempt is never held, and no retry is
// held longer than retry.maxDelayMs allows.
type BudgetSettings struct {
	// Enabled turns the budget on. Default false: the budget changes the
	// reference policy's delays for concurrent sessions of one provider.
	Enabled bool
	// MaxTokens is the bucket size; retries are held once it is half
	// empty, after MaxTokens/2 failures in a row. Default 10.
	MaxTokens float64
	// TokenRatio is the refund of one success. Default 0.1.
	TokenRatio float64
	// ProbeInterval spaces the held retries that go out while the budget
	// is spent. Default 250 ms.
	ProbeInterval time.Duration
	// ReleaseWindow spreads the held retries released when the budget
	// recovers. Default 1 s.
	ReleaseWindow time.Duration
}

// DefaultBudgetSettings returns the budget defaults (off; the other
// fields are the values used once it is turned on).
func DefaultBudgetSettings() BudgetSettings {
	return BudgetSettings{
		Enabled:       false,
		MaxTokens:     10,
		TokenRatio:    0.1,
		ProbeInterval: 250 * time.Millisecond,
		ReleaseWindow: time.Second,
	}
}

// Validate reports the first bad field as a *SettingsError, or nil. The
// fields of a disabled budget are not checked.
func (b BudgetSettings) Validate() error {
	if probs := b.Problems(); len(probs) > 0 {
		return probs[0]
	}
	return nil
}

// Problems reports every bad field, in field order; none for a disabled
// budget.
func (b BudgetSettings) Problems() []*SettingsError {
	if !b.Enabled {
		return nil
	}
	var probs []*SettingsError
	maxOK := b.MaxTokens >= 1 && b.MaxTokens <= 1e6
	if !maxOK {
		probs = append(probs, &SettingsError{"retry.budget.maxTokens", fmt.Sprintf("must be 1 to 1000000, got %v", b.MaxTokens)})
	}
	if !(b.TokenRatio > 0) || (maxOK && b.TokenRatio > b.MaxTokens) {
		probs = append(probs, &SettingsError{"retry.budget.tokenRatio",
			fmt.Sprintf("must be above 0 and at most maxTokens (%v), got %v", b.MaxTokens, b.TokenRatio)})
	}
	if b.ProbeInterval <= 0 {
		probs = append(probs, &SettingsError{"retry.budget.probeIntervalMs", fmt.Sprintf("must be above 0, got %d", b.ProbeInterval.Milliseconds())})
	}
	if b.ReleaseWindow < 0 {
		probs = append(probs, &SettingsError{"retry.budget.releaseWindowMs", fmt.Sprintf("must be 0 or more, got %d", b.ReleaseWindow.Milliseconds())})
	}
	return probs
}

// Budget is the retry budget of one provider, a pure state machine: the
// actor that owns it feeds it outcomes and admission requests and delivers
// the releases it returns. Not safe for concurrent use.
//
// It is the one owner of the provider's held retries: each Hold keeps
// where its release goes (To, of type A: an address the budget never
// reads), so the actor that owns the budget and a cluster node's router
// keep no copy. The session's core keeps only the ticket of the held
// retry it waits for (session.ChainRecord.HeldToken), to tell its release
// from a stale one.
type Budget[A any] struct {
	s         BudgetSettings
	tokens    float64
	nextProbe time.Time
	held      holdQueue[A] // earliest first, indexed by holder
	out       []Hold[A]
	delayed   int64
	released  int64
}

// BudgetStats is what a budget has done so far.
type BudgetStats struct {
	Tokens   float64 // tokens left
	Held     int     // retries held now
	Delayed  int64   // retries ever delayed past their backoff
	Released int64   // held retries ever released early
}

// Stats reports the budget's state and counters.
func (b *Budget[A]) Stats() BudgetStats {
	return BudgetStats{Tokens: b.tokens, Held: b.held.Len(), Delayed: b.delayed, Released: b.released}
}

// Hold is a retry the budget delayed: its holder (a session), the ticket
// the holder tied to it, when its backoff was due, when it may go out,
// and where its release goes.
type Hold[A any] struct {
	Holder string
	Ticket uint64
	Due    time.Time
	At     time.Time
	To     A
}

// NewBudget returns a full budget whose holds' releases go to addresses
// of type A; s must be valid.
func NewBudget[A any](s BudgetSettings) *Budget[A] {
	return &Budget[A]{s: s, tokens: s.MaxTokens, held: holdQueue[A]{index: map[string]int{}}}
}

// Tokens is the number of tokens left.
func (b *Budget[A]) Tokens() float64 { return b.tokens }

// Open reports whether retries go out unheld.
func (b *Budget[A]) Open() bool { return b.tokens > b.s.MaxTokens/2 }

// Held is the number of retries held now.
func (b *Budget[A]) Held() int { return b.held.Len() }

// Admit decides when the retry of holder, due at due, may go out: at due
// while the budget is open, else at the next probe slot (but never later
// than latest, the retry.maxDelayMs bound; zero means unbounded). A held
// retry is remembered, to be released early, to to, when the budget
// recovers; a holder's earlier hold is dropped.
func (b *Budget[A]) Admit(now time.Time, holder string, ticket uint64, due, latest time.Time, to A) time.Time {
	b.held.remove(holder)
	if b.Open() {
		return due
	}
	at := due
	if b.nextProbe.After(at) {
		at = b.nextProbe
	}
	if !latest.IsZero() && at.After(latest) {
		at = latest // beyond the probe queue: the bound wins, the slot stays free
	} else {
		b.nextProbe = at.Add(b.s.ProbeInterval)
	}
	if at.After(due) {
		heap.Push(&b.held, Hold[A]{Holder: holder, Ticket: ticket, Due: due, At: at, To: to})
		b.delayed++
	}
	return at
}

// Report counts the outcome of one request and returns the held retries
// to release now (reused by the next call): the oldest one after a
// success while the budget is spent, all of them when it recovers.
func (b *Budget[A]) Report(now time.Time, success bool) []Hold[A] {
	b.out = b.out[:0]
	wasOpen := b.Open()
	if !success {
		b.tokens = math.Max(0, b.tokens-1)
		return b.out
	}
	b.tokens = math.Min(b.s.MaxTokens, b.tokens+b.s.TokenRatio)
	b.prune(now)
	if b.Open() && !wasOpen {
		b.nextProbe = time.Time{} // the next outage's probes start afresh
	}
	switch {
	case b.held.Len() == 0:
	case b.Open() && !wasOpen:
		b.releaseAll(now)
	case !b.Open():
		b.releaseFirst(now)
	}
	return b.out
}

// Forget drops the held retry of holder (its session is gone).
func (b *Budget[A]) Forget(holder string) { b.held.remove(holder) }

// prune drops the holds whose time has come: they went out on their own.
func (b *Budget[A]) prune(now time.Time) {
	for b.held.Len() > 0 && !b.held.hs[0].At.After(now) {
		heap.Pop(&b.held)
	}
}

// releaseFirst lets the earliest held retry go out now (ack clocking: a
// success while held paces the next probe).
func (b *Budget[A]) releaseFirst(now time.Time) {
	first := heap.Pop(&b.held).(Hold[A])
	first.At = laterOf(now, first.Due)
	b.out = append(b.out, first)
	b.released++
}

// releaseAll lets every held retry go out, in the order they were held
// for, spread evenly over the release window, none before its own backoff
// was due.
func (b *Budget[A]) releaseAll(now time.Time) {
	step := time.Duration(0)
	if n := b.held.Len(); n > 1 {
		step = b.s.ReleaseWindow / time.Duration(n)
	}
	for i := 0; b.held.Len() > 0; i++ {
		h := heap.Pop(&b.held).(Hold[A])
		at := now.Add(time.Duration(i) * step)
		if at.After(h.At) {
			continue // its own slot comes first: it goes out then anyway
		}
		h.At = laterOf(at, h.Due)
		b.out = append(b.out, h)
		b.released++
	}
}

// holdQueue is a min-heap of holds by (At, Holder) with an index by holder
// (container/heap), so that the earliest is found and any holder removed in
// O(log n) whatever the number of sessions held.
type holdQueue[A any] struct {
	hs    []Hold[A]
	index map[string]int // holder -> position in hs
}

func (q *holdQueue[A]) Len() int { return len(q.hs) }

func (q *holdQueue[A]) Less(i, j int) bool {
	if !q.hs[i].At.Equal(q.hs[j].At) {
		return q.hs[i].At.Before(q.hs[j].At)
	}
	return q.hs[i].Holder < q.hs[j].Holder
}

func (q *holdQueue[A]) Swap(i, j int) {
	q.hs[i], q.hs[j] = q.hs[j], q.hs[i]
	q.index[q.hs[i].Holder], q.index[q.hs[j].Holder] = i, j
}

// Push adds a Hold (for container/heap; use heap.Push).
func (q *holdQueue[A]) Push(x any) {
	h := x.(Hold[A])
	q.index[h.Holder] = len(q.hs)
	q.hs = append(q.hs, h)
}

// Pop removes the last Hold (for container/heap; use heap.Pop).
func (q *holdQueue[A]) Pop() any {
	h := q.hs[len(q.hs)-1]
	q.hs = q.hs[:len(q.hs)-1]
	delete(q.index, h.Holder)
	return h
}

// remove drops holder's hold, if any.
func (q *holdQueue[A]) remove(holder string) {
	if i, ok := q.index[holder]; ok {
		heap.Remove(q, i)
	}
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
