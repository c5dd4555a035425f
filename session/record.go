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
	if c.state != Idle && c.state != Backoff {
		return Record{}, fmt.Errorf("session: no record while %s: only an idle session or one in backoff is at rest", c.state)
	}
	return Record{
		State: c.state, Generation: c.gen, Turn: c.turn, AutoRetry: c.enabled, Role: c.role,
		Primary: c.primary, Model: c.model, Pinned: c.pinned, PrimaryUntil: c.primaryUntil, Credential: c.credential,
		Before:  c.beforeChange,
		Attempt: c.attempt, SleepUntil: c.sleepUntil, SleepToken: c.sleepToken, Aborts: c.aborts, Chain: c.chainRecord(),
		Last: c.last, Failure: c.failure, FailureKind: c.failureKind, RetryEnd: c.retryEnd,
	}, nil
}

// Resume returns a core standing where r stood, with cfg's settings (its
// model fields are r's, and its role too when r names one) and jitter
// from src. A record of a state not at rest fails.
func Resume(cfg Config, src retry.Source, r Record) (*Core, error) {
	if r.State != Idle && r.State != Backoff {
		return nil, fmt.Errorf("session: cannot resume a record in state %s", r.State)
	}
	cfg.Model = r.Primary
	cfg.Settings.Enabled = r.AutoRetry
	if r.Role != "" {
		cfg.Role = r.Role
	}
	c := New(cfg, src)
	c.state, c.gen, c.turn = r.State, r.Generation, r.Turn
	c.model, c.pinned, c.primaryUntil, c.credential = r.Model, r.Pinned, r.PrimaryUntil, r.Credential
	c.beforeChange = r.Before
	c.attempt, c.sleepUntil, c.sleepToken, c.aborts = r.Attempt, r.SleepUntil, r.SleepToken, r.Aborts
	c.ch = r.Chain
	c.last, c.failure, c.failureKind, c.retryEnd = r.Last, r.Failure, r.FailureKind, r.RetryEnd
	return c, nil
}

// chainRecord is the chain's state, with the instant of the core's last
// step.
func (c *Core) chainRecord() ChainRecord {
	r := c.ch
	r.Now = c.now
	return r
}
