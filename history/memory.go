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
type MemoryStore struct {
	mu      sync.Mutex
	entries map[string][]*messages.Entry
	open    map[string]bool
	closed  bool
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{entries: map[string][]*messages.Entry{}, open: map[string]bool{}}
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
	s.open[session] = true
	return &memoryLog{store: s, session: session}, s.copyOf(session), nil
}

func (s *MemoryStore) copyOf(session string) []*messages.Entry {
	out := make([]*messages.Entry, len(s.entries[session]))
	for i, e := range s.entries[session] {
		out[i] = proto.Clone(e).(*messages.Entry)
	}
	return out
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
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := l.usable("append"); err != nil {
		return err
	}
	if err := checkSeq(uint64(len(s.entries[l.session])), entries); err != nil {
		return &Error{Op: "append", Path: l.session, Err: err}
	}
	for _, e := range entries {
		s.entries[l.session] = append(s.entries[l.session], proto.Clone(e).(*messages.Entry))
	}
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
	return s.copyOf(l.session), nil
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
