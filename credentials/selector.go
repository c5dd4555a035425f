// Package credentials chooses which of a provider's API keys each
// session's turns use: the session's key while it is free, a free key in
// turn for a session without one, another key when a usage limit blocks
// it, and a banked reset when no other key is free.
//
// A Selector is pure: no goroutines, no clock (every method that needs
// the time takes now), no locks. The credentials actor of a provider owns
// one, beside the reservations of its paced turns (pacing.Reservations),
// and carries out what it says.
package credentials

import "time"

// Key is one API key of a provider as selection sees it.
type Key struct {
	Name string // unique within the provider
	// BankedResets is how many usage-limit resets the key may spend
	// (only with auto-redeem on).
	BankedResets int
}

// Blocker is told each block a Selector puts on a key or lifts (zero
// until): a pacing.Pacer, which keeps turns off blocked keys.
type Blocker interface {
	Block(credential string, until time.Time)
}

// Selector is the keys of one provider, until when each is blocked, and
// each session's key. It is not safe for concurrent use: an actor owns it.
type Selector struct {
	keys       []key
	sticky     map[string]int // session -> index into keys
	next       int            // where the next session without a key starts looking
	autoRedeem bool
	blocker    Blocker // nil: none
}

// key is a Key and until when it is blocked (zero: free).
type key struct {
	Key
	blockedUntil time.Time
}

// New returns the selector of keys, none blocked. With autoRedeem, a
// usage limit with no free sibling spends a banked reset. blocker, if not
// nil, is told every block and every block lifted.
func New(keys []Key, autoRedeem bool, blocker Blocker) *Selector {
	s := &Selector{keys: make([]key, len(keys)), sticky: map[string]int{}, autoRedeem: autoRedeem, blocker: blocker}
	for i, k := range keys {
		s.keys[i].Key = k
	}
	return s
}

// Select is session's key at now: the one it holds while that is free;
// else (the first time, or once its key is blocked) the next free key in
// turn, or, with none free, the one that frees first. "" when the
// provider has no keys.
func (s *Selector) Select(now time.Time, session string) string {
	if len(s.keys) == 0 {
		return ""
	}
	if i, ok := s.sticky[session]; ok && !s.keys[i].blockedUntil.After(now) {
		return s.keys[i].Name
	}
	i := s.firstFree(now, -1)
	if i < 0 {
		i = s.earliestFree()
	}
	s.sticky[session] = i
	return s.keys[i].Name
}

// Keep makes name session's key (pacing granted the session's turn on it).
func (s *Selector) Keep(session, name string) {
	if i := s.index(name); i >= 0 {
		s.sticky[session] = i
	}
}

// Forget drops session's key: the session is gone.
func (s *Selector) Forget(session string) { delete(s.sticky, session) }

// Switch is what a usage limit did: the key it blocked and until when;
// the key the session moved to (Switched), and whether that spent a
// banked reset (Redeemed); or, with no move, when the first blocked
// sibling frees up (RetryAt; zero: none is blocked).
type Switch struct {
	Blocked      string
	BlockedUntil time.Time
	Switched     bool
	Redeemed     bool
	Credential   string
	RetryAt      time.Time
}

// Limited takes a usage limit of session's turn on the key named name (""
// or a name not of the provider: the key the session holds, else the
// first): that key is blocked for blockFor, and the session moves to the
// next free key in turn; with none free it spends a banked reset (with
// auto-redeem on, from its key on), or learns when the first blocked
// sibling frees up.
func (s *Selector) Limited(now time.Time, session, name string, blockFor time.Duration) Switch {
	if len(s.keys) == 0 {
		return Switch{}
	}
	current := s.sticky[session]    // 0 when the session holds none
	if i := s.index(name); i >= 0 { // an activation that moved has lost its sessions' keys
		current = i
	}
	until := now.Add(max(blockFor, 0))
	s.block(current, until)
	sw := Switch{Blocked: s.keys[current].Name, BlockedUntil: until}
	if i := s.firstFree(now, current); i >= 0 {
		s.sticky[session] = i
		sw.Switched, sw.Credential = true, s.keys[i].Name
		return sw
	}
	if i := s.redeem(current); i >= 0 {
		s.sticky[session] = i
		sw.Switched, sw.Redeemed, sw.Credential = true, true, s.keys[i].Name
		return sw
	}
	sw.RetryAt = s.siblingsFreeAt(now, current)
	return sw
}

// Block blocks the key named name until until (zero: lifts its block), as
// a view of the keys kept elsewhere says (a new activation takes over
// its node's blocks).
func (s *Selector) Block(name string, until time.Time) {
	if i := s.index(name); i >= 0 {
		s.block(i, until)
	}
}

// BlockedUntil is until when the i-th key is blocked (zero: free).
func (s *Selector) BlockedUntil(i int) time.Time { return s.keys[i].blockedUntil }

// Len is how many keys there are.
func (s *Selector) Len() int { return len(s.keys) }

func (s *Selector) block(i int, until time.Time) {
	s.keys[i].blockedUntil = until
	if s.blocker != nil {
		s.blocker.Block(s.keys[i].Name, until)
	}
}

// firstFree finds a key free at now other than skip, in turn from where
// the last one found left off; -1 when none is.
func (s *Selector) firstFree(now time.Time, skip int) int {
	for k := range s.keys {
		i := (s.next + k) % len(s.keys)
		if i != skip && !s.keys[i].blockedUntil.After(now) {
			s.next = i + 1
			return i
		}
	}
	return -1
}

// earliestFree is the key whose block ends first.
func (s *Selector) earliestFree() int {
	best := 0
	for i := range s.keys {
		if s.keys[i].blockedUntil.Before(s.keys[best].blockedUntil) {
			best = i
		}
	}
	return best
}

// redeem spends a banked reset of the first key from current on that has
// one, and lifts its block, when auto-redeem is on; it returns that key,
// or -1.
func (s *Selector) redeem(current int) int {
	if !s.autoRedeem {
		return -1
	}
	for k := range s.keys {
		i := (current + k) % len(s.keys)
		if s.keys[i].BankedResets > 0 {
			s.keys[i].BankedResets--
			s.block(i, time.Time{})
			return i
		}
	}
	return -1
}

// siblingsFreeAt is when the first of the keys other than current that
// are blocked at now frees up; zero when none is.
func (s *Selector) siblingsFreeAt(now time.Time, current int) time.Time {
	var earliest time.Time
	for i := range s.keys {
		if u := s.keys[i].blockedUntil; i != current && u.After(now) && (earliest.IsZero() || u.Before(earliest)) {
			earliest = u
		}
	}
	return earliest
}

// index is the index of the key named name, or -1.
func (s *Selector) index(name string) int {
	for i := range s.keys {
		if s.keys[i].Name == name {
			return i
		}
	}
	return -1
}
