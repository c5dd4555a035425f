// Package history persists each session's conversation (what is kept, as
// opposed to the context sent to the model): one JSON-lines file per
// session by default, or memory.
package history

import (
	"context"
	"errors"
	"fmt"

	"github.com/musepi/musepi/messages"
)

// Store keeps the persisted history of sessions. Implementations are safe
// for concurrent use.
type Store interface {
	// Open opens session's history for appending and returns the entries
	// it holds, oldest first (none for a new session). The session has one
	// writer: until the Log is closed, opening it again (from this or
	// another process) fails with ErrLocked. Invalid content fails with an
	// *Error naming the line, and nothing is written.
	Open(session string) (Log, []*messages.Entry, error)
	// Close releases the store; later calls fail with ErrClosed.
	Close() error
}

// Log is one open session history, written by one session actor.
type Log interface {
	// Append adds entries at the end, all or nothing: after an error the
	// history is as it was before the call, and a later Append may succeed
	// (once the disk has room again).
	Append(entries ...*messages.Entry) error
	// Sync makes what was appended durable, as the store's Sync policy says
	// (a no-op under SyncNone and for memory).
	Sync() error
	// Load returns the whole history, oldest first.
	Load() ([]*messages.Entry, error)
	// Close releases the session for another writer.
	Close() error
}

// Holder is a Log that another node may take its session from (a shared
// store's). The session asks it before it acts for the session (calls a
// provider, runs a tool): an error means the Log no longer holds the
// session, or cannot tell that it does, and the session must not act.
type Holder interface {
	Hold(ctx context.Context) error
	// Taken reports, without asking anyone, whether the Log already
	// knows that the session is another activation's (what Hold says with
	// ErrTaken).
	Taken() bool
}

// Errors an *Error wraps; test with errors.Is.
var (
	// ErrClosed is returned by a closed store or log.
	ErrClosed = errors.New("store closed")
	// ErrBadSessionID is returned for a session id that cannot name a file.
	ErrBadSessionID = errors.New("bad session id")
	// ErrLocked is returned when another writer holds the session open.
	ErrLocked = errors.New("session is open in another process")
	// ErrInvalid is returned for content that is not a valid history.
	ErrInvalid = errors.New("invalid history")
	// ErrTaken is wrapped by a Holder's errors that say the session is
	// certainly another activation's now (another node took it over, or
	// this node was dropped from its cluster), rather than that the Log
	// cannot tell.
	ErrTaken = errors.New("the session is another activation's")
)

// Error is a failed history operation. Callers test it with errors.As (to
// read the file and line) or errors.Is (for the cause: ErrLocked,
// ErrInvalid, fs.ErrPermission, syscall.ENOSPC, ...).
type Error struct {
	Op   string // "open", "append", "sync", "load", "close", "repair"
	Path string // the history file (or the session id for memory)
	Line int    // 1-based line of invalid content; 0 when not about a line
	Err  error
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("history: %s %s: line %d: %v", e.Op, e.Path, e.Line, e.Err)
	}
	return fmt.Sprintf("history: %s %s: %v", e.Op, e.Path, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// ValidSessionID reports whether id is usable: 1-128 characters of
// letters, digits, '-', '_' and '.', not starting with '.'.
func ValidSessionID(id string) bool {
	if id == "" || len(id) > 128 || id[0] == '.' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}
