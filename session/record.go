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
// which arms the backoff again for what is left of it. Its wire form,
// messages.SessionRecord, is generated from it (the fields' wire tags are
// their protobuf numbers; see internal/genrecord): enums are their names,
// instants Unix nanoseconds (0: none), durations nanoseconds.
//
// wire: reserved 11 attempt: the chain's last auto_retry_start, which is Chain.Attempt at rest
// wire: reserved 13 sleep_token: the backoff timer's token, which is Chain.Token at rest
type Record struct {
	// The small fields first, packed together (a record is kept per
	// session: padding costs every session).
	State     State            `wire:"1"` // Idle or Backoff
	AutoRetry bool             `wire:"4"` // retry.enabled as the session last set it
	Pinned    bool             `wire:"7"` // the model in use is a pinned fallback (never reverted)
	Aborts    retry.AbortState `wire:"14,flat"`

	Generation uint64 `wire:"2"`
	Turn       uint64 `wire:"3"`
	Role       string `wire:"22"`

	// HistorySeq is the seq of the last history entry when the record was
	// taken: the owner sets it (the core keeps no history), so that a store
	// can tell a record from before the history's end.
	HistorySeq uint64 `wire:"23"`

	Primary      string    `wire:"5"` // the primary "provider/model" (the user may have picked another)
	Model        string    `wire:"6"` // the model in use
	PrimaryUntil time.Time `wire:"8"`
	Credential   string    `wire:"9"`
	// Reservation is the token of the turn's rate-limit reservation, from
	// when the credentials actor answered a paced ask until the turn ends
	// (0: none).
	Reservation uint64 `wire:"24"`
	// Before is what the last model change replaced, to undo it.
	Before ModelState `wire:"10"`

	SleepUntil time.Time   `wire:"12"` // when the backoff ends (in backoff)
	Chain      ChainRecord `wire:"17"` // the retry chain: its attempt, and the token of the backoff timer

	// How the prompt stands so far: its last message and, once a chain
	// failed, why.
	Last        *messages.AssistantMessage `wire:"18"`
	Failure     string                     `wire:"19"`
	FailureKind ErrorKind                  `wire:"20"`
	RetryEnd    *retry.EndEvent            `wire:"21"`
}

// ModelState is the model part of a record: in use, primary, pinning and
// when the primary may be restored.
type ModelState struct {
	Model        string    `wire:"1"`
	Primary      string    `wire:"2"`
	Pinned       bool      `wire:"3"`
	PrimaryUntil time.Time `wire:"4"`
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
	c.become(r.State)
	return c, nil
}
