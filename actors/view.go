package actors

import (
	"slices"
	"sync"
	"time"
)

// CredentialsView mirrors what a credentials actor holds, for readers
// outside the actor (Runtime.Stats): its credentials' blocked-until times
// and its retry budget's tokens. The actor writes it after each change.
type CredentialsView struct {
	mu      sync.Mutex
	blocked []time.Time // per credential, in the actor's order
	budget  bool
	tokens  float64
}

func (v *CredentialsView) publish(a *CredentialsActor) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.blocked = v.blocked[:0]
	for _, c := range a.creds {
		v.blocked = append(v.blocked, c.blockedUntil)
	}
	if v.budget = a.budget != nil; v.budget {
		v.tokens = a.budget.Tokens()
	}
}

// Blocked is how many credentials are blocked at now (after a usage limit).
func (v *CredentialsView) Blocked(now time.Time) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, until := range v.blocked {
		if until.After(now) {
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

func (v *CooldownView) set(selector string, until time.Time) {
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
