package history

import (
	"fmt"
	"os"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/messages"
)

// MemoryStore keeps histories in memory, for sessions that need not
// survive the process. Like a FileStore, a session has one writer at a time.
// Entries are kept in their protobuf encoding: compact, and bytes the
// garbage collector need not scan (a storm's sessions hold millions).
type MemoryStore struct {
	mu      sync.Mutex
	entries map[string][][]byte
	open    map[string]bool
	closed  bool
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{entries: map[string][][]byte{}, open: map[string]bool{}}
}

// Open opens session's history, returning copies of its entries.
func (s *MemoryStore) Open(session string) (Log, []*messages.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, nil, &Error{Op: "open", Path: session, Err: ErrClosed}
	case s.open[session]:
		return nil, nil, &Error{Op: "open", Path: session, Err: fmt.Errorf("%w (pid %d)", ErrLocked, os.Getpid())}
	}
	entries, err := s.copyOf(session)
	if err != nil {
		return nil, nil, &Error{Op: "open", Path: session, Err: err}
	}
	s.open[session] = true
	return &memoryLog{store: s, session: session}, entries, nil
}

// copyOf decodes session's entries.
func (s *MemoryStore) copyOf(session string) ([]*messages.Entry, error) {
	out := make([]*messages.Entry, len(s.entries[session]))
	for i, b := range s.entries[session] {
		out[i] = &messages.Entry{}
		if err := proto.Unmarshal(b, out[i]); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
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

// memoryLog is one open session of a MemoryStore.
type memoryLog struct {
	store   *MemoryStore
	session string
	closed  bool // guarded by store.mu
}

// usable fails once the log or its store is closed; s.mu is held.
func (l *memoryLog) usable(op string) error {
	if l.closed || l.store.closed {
		return &Error{Op: op, Path: l.session, Err: ErrClosed}
	}
	return nil
}

func (l *memoryLog) Append(entries ...*messages.Entry) error {
	encoded := make([][]byte, len(entries))
	for i, e := range entries {
		b, err := proto.Marshal(e)
		if err != nil {
			return &Error{Op: "append", Path: l.session, Err: err}
		}
		encoded[i] = b
	}
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := l.usable("append"); err != nil {
		return err
	}
	if err := checkSeq(uint64(len(s.entries[l.session])), entries); err != nil {
		return &Error{Op: "append", Path: l.session, Err: err}
	}
	s.entries[l.session] = append(s.entries[l.session], encoded...)
	return nil
}

func (l *memoryLog) Sync() error { return nil }

func (l *memoryLog) Load() ([]*messages.Entry, error) {
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := l.usable("load"); err != nil {
		return nil, err
	}
	entries, err := s.copyOf(l.session)
	if err != nil {
		return nil, &Error{Op: "load", Path: l.session, Err: err}
	}
	return entries, nil
}

func (l *memoryLog) Close() error {
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if !l.closed {
		l.closed = true
		delete(s.open, l.session)
	}
	return nil
}
