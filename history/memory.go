package history

import (
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/messages"
)

// MemoryStore keeps histories in memory, for sessions that need not
// survive the process.
type MemoryStore struct {
	mu      sync.Mutex
	entries map[string][]*messages.Entry
	closed  bool
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{entries: map[string][]*messages.Entry{}}
}

// Append copies entries to the end of session's history.
func (s *MemoryStore) Append(session string, entries ...*messages.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	for _, e := range entries {
		s.entries[session] = append(s.entries[session], proto.Clone(e).(*messages.Entry))
	}
	return nil
}

// Load returns copies of session's entries.
func (s *MemoryStore) Load(session string) ([]*messages.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	out := make([]*messages.Entry, len(s.entries[session]))
	for i, e := range s.entries[session] {
		out[i] = proto.Clone(e).(*messages.Entry)
	}
	return out, nil
}

// Close drops everything.
func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.entries = nil
	return nil
}
