package actors

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/pacing"
)

// CredentialsView mirrors what a credentials actor holds, for readers
// outside the actor: until when each of its keys is blocked (read without
// a lock by the sessions, see Free; counted by Runtime.Stats) and its retry
// budget's tokens. The actor writes it after each change, before it
// answers.
type CredentialsView struct {
	index map[string]int // key name -> index, fixed
	until []atomic.Int64 // unix ns each key is blocked until (0: never)

	mu     sync.Mutex
	budget bool
	tokens float64

	paced   atomic.Bool           // a rate limit of a key is known: turns reserve
	waiting [3]atomic.Int64       // turns waiting for a budget, by priority
	levels  []pacing.Level        // what the keys have left, guarded by mu
	loads   map[overload.Key]Load // the overload limiter's figures per model, guarded by mu

	waited atomic.Pointer[WaitObserver] // told of each capacity wait's end (nil: nobody)
}

// Load is a model's figures in the overload limiter: its limit and the
// calls in flight to it.
type Load struct {
	Limit, InFlight int
}

// WaitObserver is told of each wait for a place within a model's
// concurrency limit as it ends, granted or given up: the model, the
// turn's priority and how long it waited.
type WaitObserver func(key overload.Key, priority pacing.Priority, waited time.Duration)

// NewCredentialsView returns the view of a credentials actor holding creds.
func NewCredentialsView(creds []Credential) *CredentialsView {
	v := &CredentialsView{index: make(map[string]int, len(creds)), until: make([]atomic.Int64, len(creds))}
	for i, c := range creds {
		v.index[c.Name] = i
	}
	return v
}

func (v *CredentialsView) publish(a *CredentialsActor) {
	if v == nil {
		return
	}
	for i := range a.keys.Len() {
		var ns int64
		if until := a.keys.BlockedUntil(i); !until.IsZero() {
			ns = until.UnixNano()
		}
		v.until[i].Store(ns)
	}
	var levels []pacing.Level
	if a.pacing != nil {
		p := a.pacing.Pacer()
		v.paced.Store(p.Paced())
		for i, n := range p.Waiting() {
			v.waiting[i].Store(int64(n))
		}
		levels = p.Levels(a.clk.Now())
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.levels = levels
	if v.budget = a.budget != nil; v.budget {
		v.tokens = a.budget.Tokens()
	}
}

// setLoad records key's figures in the overload limiter.
func (v *CredentialsView) setLoad(key overload.Key, l Load) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.loads == nil {
		v.loads = map[overload.Key]Load{}
	}
	v.loads[key] = l
}

// ConcurrencyLimit is the overload limiter's limit of key as the actor
// last published it; false when key has had no call under a limiter.
func (v *CredentialsView) ConcurrencyLimit(key overload.Key) (int, bool) {
	if v == nil {
		return 0, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	l, ok := v.loads[key]
	return l.Limit, ok
}

// Loads are the overload limiter's figures of each model that has had a
// call, as the actor last published them (nil: none, or no limiter).
func (v *CredentialsView) Loads() map[overload.Key]Load {
	if v == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.loads)
}

// ObserveWaits has f told of each capacity wait as it ends, from now on
// (nil: nobody is told).
func (v *CredentialsView) ObserveWaits(f WaitObserver) {
	if f == nil {
		v.waited.Store(nil)
		return
	}
	v.waited.Store(&f)
}

// waitEnded tells the wait observer, if any, that a turn of priority
// waited for a place within key's limit from since until now.
func (v *CredentialsView) waitEnded(key overload.Key, priority pacing.Priority, since, now time.Time) {
	if v == nil {
		return
	}
	if f := v.waited.Load(); f != nil {
		(*f)(key, priority, now.Sub(since))
	}
}

// Until is until when the key named name is blocked (zero: free); false
// when the key is not one of the view's.
func (v *CredentialsView) Until(name string) (time.Time, bool) {
	if v == nil {
		return time.Time{}, false
	}
	i, ok := v.index[name]
	if !ok {
		return time.Time{}, false
	}
	if ns := v.until[i].Load(); ns != 0 {
		return time.Unix(0, ns), true
	}
	return time.Time{}, true
}

// Set records that the key named name is blocked until until (zero: free),
// as a credentials actor on another cluster node published it; it reports
// whether the key is one of the view's.
func (v *CredentialsView) Set(name string, until time.Time) bool {
	if v == nil {
		return false
	}
	i, ok := v.index[name]
	if !ok {
		return false
	}
	var ns int64
	if !until.IsZero() {
		ns = until.UnixNano()
	}
	v.until[i].Store(ns)
	return true
}

// Free reports whether the key named name is one of the view's and not
// blocked at now. A session retrying on a free key goes on with it, which
// is what the actor would answer (the session's sticky key), without
// asking; any other selection asks the actor.
func (v *CredentialsView) Free(name string, now time.Time) bool {
	if v == nil {
		return false
	}
	i, ok := v.index[name]
	return ok && v.until[i].Load() <= now.UnixNano()
}

// Blocked is how many credentials are blocked at now (after a usage limit).
func (v *CredentialsView) Blocked(now time.Time) int {
	n := 0
	for i := range v.until {
		if v.until[i].Load() > now.UnixNano() {
			n++
		}
	}
	return n
}

// BudgetTokens is the retry budget's tokens; false when the provider has
// no budget.
func (v *CredentialsView) BudgetTokens() (float64, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.tokens, v.budget
}

// CooldownView mirrors a model-fallback actor's selector cooldowns, for
// readers outside the actor.
type CooldownView struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// Set records selector's cooldown end: the actor's own change, or one a
// model-fallback actor on another cluster node published.
func (v *CooldownView) Set(selector string, until time.Time) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.until == nil {
		v.until = map[string]time.Time{}
	}
	v.until[selector] = until
}

// CoolingDown lists the selectors in cooldown at now, sorted.
func (v *CooldownView) CoolingDown(now time.Time) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for sel, until := range v.until {
		if until.After(now) {
			out = append(out, sel)
		}
	}
	slices.Sort(out)
	return out
}

// Until is the end of selector's cooldown (zero: none recorded).
func (v *CooldownView) Until(selector string) time.Time {
	if v == nil {
		return time.Time{}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.until[selector]
}

// all copies the cooldowns, for a new actor to start from.
func (v *CooldownView) all() map[string]time.Time {
	out := map[string]time.Time{}
	if v == nil {
		return out
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for sel, until := range v.until {
		out[sel] = until
	}
	return out
}

// Paced reports whether a rate limit of one of the keys is known, so that
// turns reserve before they go out.
func (v *CredentialsView) Paced() bool { return v != nil && v.paced.Load() }

// Waiting is how many turns wait for a rate-limit budget, by priority.
func (v *CredentialsView) Waiting() [3]int64 {
	var n [3]int64
	if v != nil {
		for i := range n {
			n[i] = v.waiting[i].Load()
		}
	}
	return n
}

// Levels are what the keys had left of each rate limit known, when the
// actor last published.
func (v *CredentialsView) Levels() []pacing.Level {
	if v == nil {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.levels
}
