package retry

import "time"

// ChainState is a chain's state as plain values, without its jitter source
// and settings: what a session's record keeps so that another process can
// resume the chain where it stood (the same attempt, the same token).
type ChainState struct {
	Phase      Phase
	Attempt    int
	Started    bool   // auto_retry_start was emitted in this chain
	Token      uint64 // of the request or timer the chain waits for
	Generation uint64 // prompt generation of the failing turn
	Now        time.Time

	HeldToken uint64    // the budget ask whose release may still move the sleep
	AskedAt   time.Time // when the budget was asked

	// The attempt being decided.
	Class    Class
	ErrText  string
	Delay    time.Duration
	Wait     time.Duration
	Cooldown time.Duration
	Switched bool

	FallbackApplied bool
	FallbackModel   string
	FallbackRole    string
}

// State returns the chain's state.
func (c *Chain) State() ChainState {
	return ChainState{
		Phase: c.phase, Attempt: c.attempt, Started: c.started, Token: c.token, Generation: c.generation, Now: c.now,
		HeldToken: c.heldToken, AskedAt: c.askedAt,
		Class: c.class, ErrText: c.errText, Delay: c.delay, Wait: c.wait, Cooldown: c.cooldown, Switched: c.switched,
		FallbackApplied: c.fallbackApplied, FallbackModel: c.fallbackModel, FallbackRole: c.fallbackRole,
	}
}

// SetState puts the chain where s stood; its jitter source and settings
// stay its own.
func (c *Chain) SetState(s ChainState) {
	c.phase, c.attempt, c.started, c.token, c.generation, c.now = s.Phase, s.Attempt, s.Started, s.Token, s.Generation, s.Now
	c.heldToken, c.askedAt = s.HeldToken, s.AskedAt
	c.class, c.errText, c.delay, c.wait, c.cooldown, c.switched = s.Class, s.ErrText, s.Delay, s.Wait, s.Cooldown, s.Switched
	c.fallbackApplied, c.fallbackModel, c.fallbackRole = s.FallbackApplied, s.FallbackModel, s.FallbackRole
}

// ParsePhase is the Phase named name (Phase.String), false for none.
func ParsePhase(name string) (Phase, bool) {
	for p, n := range phaseNames {
		if n == name {
			return Phase(p), true
		}
	}
	return 0, false
}

// ParseClass is the Class named name (Class.String), false for none.
func ParseClass(name string) (Class, bool) {
	for c, n := range classNames {
		if n == name {
			return Class(c), true
		}
	}
	return 0, false
}
