package history

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/messages"
)

// MemoryStore keeps histories in memory, for sessions that need not
// survive the process. Like a FileStore, a session has one writer at a time.
// Entries are kept in their protobuf encoding, one length-prefixed buffer
// per session: compact, and bytes the garbage collector need not scan (a
// storm's sessions hold millions).
type MemoryStore struct {
	mu        sync.Mutex // guards histories and their open flags
	histories map[string]*memoryHistory
	closed    atomic.Bool
	records   bool // its Logs are RecordLogs (WithRecords)
}

// memoryHistory is one session's entries: each the uvarint length of its
// encoding, then the encoding, in chunks that grow (256 B, doubling up to
// 4 KiB) and are never copied: no garbage per append, little slack. (Slower
// growth saved half a kilobyte of the larger histories of the real-mode
// storm but cost more on the virtual storm's; doubling stays.)
type memoryHistory struct {
	// first is the history's first Log, made with it: one allocation, the
	// Log's fields on the line next to the history's lock (later Logs,
	// after a Close, are allocations of their own).
	first      memoryLog
	firstTaken bool // first was handed out; guarded by the store's mu
	open       bool // a Log has it open; guarded by the store's mu

	mu sync.Mutex
	// last is the chunk entries go to, full the chunks before it: an
	// append reads last's header here, next to the lock, not in an array
	// of its own.
	last   []byte
	full   [][]byte
	n      uint64  // entries
	record *Record // the session's record (WithRecords), a copy
}

// Chunk sizes of a memory history.
const (
	firstChunk = 256
	maxChunk   = 4 << 10
)

// room returns a chunk with room for need more bytes: the last one, or a
// new one.
func (h *memoryHistory) room(need int) []byte {
	if cap(h.last)-len(h.last) >= need {
		return h.last
	}
	size := firstChunk
	if h.last != nil {
		size = min(2*cap(h.last), maxChunk)
		h.full = append(h.full, h.last)
	}
	h.last = make([]byte, 0, max(size, need))
	return h.last
}

// MemoryOption configures a MemoryStore.
type MemoryOption func(*MemoryStore)

// WithRecords makes the store keep each session's record next to its
// history: its Logs are RecordLogs, so sessions write their record at each
// backoff and resume their retry chain from it when opened again. Without
// it (the default) sessions keep no record and an interrupted prompt is
// closed with a marker when its session is opened again.
func WithRecords() MemoryOption { return func(s *MemoryStore) { s.records = true } }

// NewMemoryStore returns an empty store.
func NewMemoryStore(opts ...MemoryOption) *MemoryStore {
	s := &MemoryStore{histories: map[string]*memoryHistory{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Open opens session's history, returning copies of its entries.
func (s *MemoryStore) Open(session string) (Log, []*messages.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, nil, &Error{Op: "open", Path: session, Err: ErrClosed}
	}
	h := s.histories[session]
	switch {
	case h == nil:
		h = &memoryHistory{}
		s.histories[session] = h
	case h.open:
		return nil, nil, &Error{Op: "open", Path: session, Err: fmt.Errorf("%w (pid %d)", ErrLocked, os.Getpid())}
	}
	entries, err := h.decode()
	if err != nil {
		return nil, nil, &Error{Op: "open", Path: session, Err: err}
	}
	h.open = true
	l := h.newLog(s, session)
	if s.records {
		return &memoryRecordLog{l}, entries, nil
	}
	return l, entries, nil
}

// newLog is a Log of h in store s, h's first if not handed out yet; the
// store's mu is held.
func (h *memoryHistory) newLog(s *MemoryStore, session string) *memoryLog {
	if h.firstTaken {
		return &memoryLog{store: s, session: session, history: h}
	}
	h.firstTaken = true
	h.first = memoryLog{store: s, session: session, history: h}
	return &h.first
}

// decode returns copies of the entries.
func (h *memoryHistory) decode() ([]*messages.Entry, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*messages.Entry, 0, h.n)
	for _, b := range slices.Concat(h.full, [][]byte{h.last}) {
		for len(b) > 0 {
			size, n := protowire.ConsumeVarint(b)
			if n < 0 || uint64(len(b)-n) < size {
				return nil, fmt.Errorf("entry %d: truncated", len(out)+1)
			}
			e := &messages.Entry{}
			if err := proto.Unmarshal(b[n:n+int(size)], e); err != nil {
				return nil, fmt.Errorf("entry %d: %w", len(out)+1, err)
			}
			out = append(out, e)
			b = b[n+int(size):]
		}
	}
	return out, nil
}

// Close drops everything.
func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed.Store(true)
	s.histories = nil
	return nil
}

// memoryLog is one open session of a MemoryStore.
type memoryLog struct {
	store   *MemoryStore
	session string
	history *memoryHistory
	closed  bool // guarded by history.mu
}

// usable fails once the log or its store is closed; history.mu is held.
func (l *memoryLog) usable(op string) error {
	if l.closed || l.store.closed.Load() {
		return &Error{Op: op, Path: l.session, Err: ErrClosed}
	}
	return nil
}

// Append encodes the entries and adds them, all or none.
func (l *memoryLog) Append(entries ...*messages.Entry) error {
	h := l.history
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := l.usable("append"); err != nil {
		return err
	}
	return l.appendLocked("append", entries)
}

// appendLocked adds the entries, all or none; history.mu is held.
func (l *memoryLog) appendLocked(op string, entries []*messages.Entry) error {
	h := l.history
	if err := checkSeq(h.n, entries); err != nil {
		return &Error{Op: op, Path: l.session, Err: err}
	}
	k0, last0 := len(h.full), h.last // where the history ends, to undo a failure
	for _, e := range entries {
		size := proto.Size(e)
		chunk := protowire.AppendVarint(h.room(protowire.SizeVarint(uint64(size))+size), uint64(size))
		chunk, err := (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(chunk, e)
		if err != nil {
			h.full, h.last = h.full[:k0], last0
			return &Error{Op: op, Path: l.session, Err: err}
		}
		h.last = chunk
	}
	h.n += uint64(len(entries))
	return nil
}

func (l *memoryLog) Sync() error { return nil }

func (l *memoryLog) Load() ([]*messages.Entry, error) {
	l.history.mu.Lock()
	err := l.usable("load")
	l.history.mu.Unlock()
	if err != nil {
		return nil, err
	}
	entries, err := l.history.decode()
	if err != nil {
		return nil, &Error{Op: "load", Path: l.session, Err: err}
	}
	return entries, nil
}

func (l *memoryLog) Close() error {
	h := l.history
	h.mu.Lock()
	already := l.closed
	l.closed = true
	h.mu.Unlock()
	if !already {
		s := l.store
		s.mu.Lock()
		h.open = false
		s.mu.Unlock()
	}
	return nil
}

// memoryRecordLog is a memoryLog of a store made WithRecords.
type memoryRecordLog struct{ *memoryLog }

var _ RecordLog = memoryRecordLog{}

// CommitRecord appends the entries and keeps a copy of rec, both or neither.
func (l memoryRecordLog) CommitRecord(rec Record, entries ...*messages.Entry) error {
	h := l.history
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := l.usable("commit"); err != nil {
		return err
	}
	if err := l.appendLocked("commit", entries); err != nil {
		return err
	}
	h.record = &Record{Data: slices.Clone(rec.Data), Due: rec.Due}
	return nil
}

// LastRecord returns a copy of the record.
func (l memoryRecordLog) LastRecord() (Record, bool, error) {
	h := l.history
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := l.usable("load record"); err != nil {
		return Record{}, false, err
	}
	if h.record == nil {
		return Record{}, false, nil
	}
	return Record{Data: slices.Clone(h.record.Data), Due: h.record.Due}, true, nil
}
