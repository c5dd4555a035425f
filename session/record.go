package session

import (
	"fmt"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// Record is a core at rest — idle, or waiting out a backoff — as plain
// values: what a store keeps of a session between its turns, and what a
// core is resumed from in another actor or on another node (Resume).
// A resumed core in backoff owes its owner a timer: step it InTimerLost,
// which arms the backoff again for what is left of it.
type Record struct {
	State      State // Idle or Backoff
	Generation uint64
	Turn       uint64
	AutoRetry  bool // retry.enabled as the session last set it
	Role       string

	// HistorySeq is the seq of the last history entry when the record was
	// taken: the owner sets it (the core keeps no history), so that a store
	// can tell a record from before the history's end.
	HistorySeq uint64

	Primary      string // the primary "provider/model" (the user may have picked another)
	Model        string // the model in use
	Pinned       bool
	PrimaryUntil time.Time
	Credential   string
	// Reservation is the token of the turn's rate-limit reservation, from
	// when the credentials actor answered a paced ask until the turn ends
	// (0: none).
	Reservation uint64
	// Before is what the last model change replaced, to undo it.
	Before ModelState

	Attempt    int       // of the open chain's last auto_retry_start
	SleepUntil time.Time // when the backoff ends (in backoff)
	SleepToken uint64
	Aborts     retry.AbortState
	Chain      ChainRecord

	// How the prompt stands so far: its last message and, once a chain
	// failed, why.
	Last        *messages.AssistantMessage
	Failure     string
	FailureKind ErrorKind
	RetryEnd    *retry.EndEvent
}

// ModelState is the model part of a record: in use, primary, pinning and
// when the primary may be restored.
type ModelState struct {
	Model, Primary string
	Pinned         bool
	PrimaryUntil   time.Time
}

// Record returns the core's state, when it is at rest: idle, or in a
// backoff. In any other state work is in flight (a turn, tools, an ask to
// another actor) that a record could not carry, and it fails.
func (c *Core) Record() (Record, error) {
	if c.r.State != Idle && c.r.State != Backoff {
		return Record{}, fmt.Errorf("session: no record while %s: only an idle session or one in backoff is at rest", c.r.State)
	}
	return c.r, nil
}

// Resume returns a core standing where r stood, with cfg's settings and
// jitter from src (its role is r's when r names one). A record of a state
// not at rest fails.
func Resume(cfg Config, src retry.Source, r Record) (*Core, error) {
	if r.State != Idle && r.State != Backoff {
		return nil, fmt.Errorf("session: cannot resume a record in state %s", r.State)
	}
	if r.Role != "" {
		cfg.Role = r.Role
	}
	c := New(cfg, src)
	role := c.r.Role
	c.r = r
	c.r.Role = role
	return c, nil
}
