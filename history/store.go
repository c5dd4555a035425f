// Package history persists each session's conversation (what is kept, as
// opposed to the runtime context sent to the model): one JSON-lines file per
// session by default, or memory.
package history

import (
	"errors"

	"github.com/musepi/musepi/messages"
)

// Store keeps the persisted history of sessions. Implementations are safe
// for concurrent use; a session appends only from its own actor.
type Store interface {
	// Append adds entries to the end of session's history.
	Append(session string, entries ...*messages.Entry) error
	// Load returns session's whole history, oldest first (empty if none).
	Load(session string) ([]*messages.Entry, error)
	// Close flushes and releases the store; later calls fail with ErrClosed.
	Close() error
}

// ErrClosed is returned by a closed store.
var ErrClosed = errors.New("history: store closed")

// ErrBadSessionID is returned for a session id that cannot name a file.
var ErrBadSessionID = errors.New("history: bad session id")

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
