package history

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/musepi/musepi/messages"
)

// File is what a FileStore needs of an open history file; *os.File is one.
// WithOpenFile substitutes another, e.g. one that fails like a full disk.
type File interface {
	io.ReaderAt
	io.WriterAt
	Stat() (fs.FileInfo, error)
	Truncate(size int64) error
	Sync() error
	Fd() uintptr
	Close() error
}

// Sync is when a FileStore makes appended entries durable with fsync.
type Sync int

const (
	// SyncTurn syncs at the end of each turn: after the assistant message
	// and after the tool results (the default). A killed process loses
	// nothing written; a power cut may lose the turn in progress.
	SyncTurn Sync = iota
	// SyncEntry syncs after every entry (slowest, loses nothing written).
	SyncEntry
	// SyncNone leaves flushing to the operating system.
	SyncNone
)

var syncNames = []string{SyncTurn: "turn", SyncEntry: "entry", SyncNone: "none"}

func (s Sync) String() string {
	if int(s) < len(syncNames) {
		return syncNames[s]
	}
	return "Sync(" + strconv.Itoa(int(s)) + ")"
}

// ParseSync reads a Sync policy name: "turn", "entry" or "none".
func ParseSync(name string) (Sync, error) {
	for i, n := range syncNames {
		if n == name {
			return Sync(i), nil
		}
	}
	return 0, fmt.Errorf("history sync %q: want turn, entry or none", name)
}

// FileStore keeps one JSON-lines file per session in a directory (see
// FormatVersion). An open session holds its file's descriptor and an
// exclusive flock on it; the pid of the holder is written next to it in
// <session>.lock, for the error a second opener gets.
type FileStore struct {
	dir      string
	sync     Sync
	log      *slog.Logger
	openFile func(name string, flag int, perm fs.FileMode) (File, error)

	mu     sync.Mutex
	closed bool
}

// FileOption configures a FileStore.
type FileOption func(*FileStore)

// WithSync sets when appends are synced (default SyncTurn).
func WithSync(s Sync) FileOption { return func(fs *FileStore) { fs.sync = s } }

// WithLogger logs warnings (wide permissions, a torn last line) to log
// (default: none).
func WithLogger(log *slog.Logger) FileOption { return func(fs *FileStore) { fs.log = log } }

// WithOpenFile opens history files with open instead of os.OpenFile.
func WithOpenFile(open func(name string, flag int, perm fs.FileMode) (File, error)) FileOption {
	return func(fs *FileStore) { fs.openFile = open }
}

func osOpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	return os.OpenFile(name, flag, perm)
}

// OpenFileStore opens (creating, mode 0700) a store in dir. An existing
// directory that others may read or enter is used with a warning.
func OpenFileStore(dir string, opts ...FileOption) (*FileStore, error) {
	s := &FileStore{dir: dir, log: slog.New(slog.DiscardHandler), openFile: osOpenFile}
	for _, o := range opts {
		o(s)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, &Error{Op: "open", Path: dir, Err: err}
	}
	info, err := os.Stat(dir)
	if err != nil {
		return nil, &Error{Op: "open", Path: dir, Err: err}
	}
	if info.Mode().Perm()&0o077 != 0 {
		s.log.Warn("history directory is accessible to other users; histories hold conversations: chmod 700 it", slog.String("dir", dir), slog.String("mode", info.Mode().Perm().String()))
	}
	return s, nil
}

func (s *FileStore) path(session string) (string, error) {
	if !ValidSessionID(session) {
		return "", &Error{Op: "open", Path: session, Err: ErrBadSessionID}
	}
	return filepath.Join(s.dir, session+".jsonl"), nil
}

// Open opens session's file (creating it, mode 0600, with the format
// header), locks it, reads it and truncates a torn last line away (a crash
// mid-write leaves one) with a warning.
func (s *FileStore) Open(session string) (Log, []*messages.Entry, error) {
	p, err := s.path(session)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, nil, &Error{Op: "open", Path: p, Err: ErrClosed}
	}
	f, err := s.openFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, &Error{Op: "open", Path: p, Err: err}
	}
	l := &fileLog{path: p, lockPath: lockPathOf(p), f: f, sync: s.sync}
	entries, err := l.open(s.log)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return l, entries, nil
}

// legacyTimestampKey is how files written before the pi wire format named
// the timestamps of user and assistant messages; they are "timestamp" now.
var legacyTimestampKey, timestampKey = []byte(`"timestampMs":`), []byte(`"timestamp":`)

// legacyTimestamps renames the old timestamp key of a line. The key can only
// match as an object key: inside a JSON string its quotes would be escaped.
func legacyTimestamps(line []byte) []byte {
	if !bytes.Contains(line, legacyTimestampKey) {
		return line
	}
	return bytes.ReplaceAll(line, legacyTimestampKey, timestampKey)
}

// Close marks the store closed; open logs stay usable until closed.
func (s *FileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// fileLog is one open, locked history file.
type fileLog struct {
	path, lockPath string
	f              File
	sync           Sync

	mu     sync.Mutex
	size   int64  // bytes of complete lines: where the next append goes
	seq    uint64 // of the last entry
	dirty  bool   // bytes past size may remain from a failed append
	closed bool
}

func (l *fileLog) fail(op string, err error) error { return &Error{Op: op, Path: l.path, Err: err} }

// open locks and reads the file, and prepares it for appends.
func (l *fileLog) open(log *slog.Logger) ([]*messages.Entry, error) {
	if err := syscall.Flock(int(l.f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, l.fail("open", fmt.Errorf("%w (pid %s)", ErrLocked, lockHolder(l.lockPath)))
		}
		return nil, l.fail("open", fmt.Errorf("lock: %w", err))
	}
	info, err := l.f.Stat()
	if err != nil {
		return nil, l.fail("open", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		log.Warn("history file is accessible to other users; it holds a conversation: chmod 600 it", slog.String("file", l.path), slog.String("mode", info.Mode().Perm().String()))
	}
	data := make([]byte, info.Size())
	if _, err := l.f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, l.fail("open", err)
	}
	sc := parse(data, false)
	if len(sc.problems) > 0 {
		pr := sc.problems[0]
		return nil, &Error{Op: "open", Path: l.path, Line: pr.Line, Err: fmt.Errorf("%w: %v (musepi history check/repair)", ErrInvalid, pr.Err)}
	}
	l.size = sc.end
	if n := len(sc.entries); n > 0 {
		l.seq = sc.entries[n-1].GetSeq()
	}
	if sc.torn > 0 {
		log.Warn("history ends with a partial line (a crash mid-write); truncating it", slog.String("file", l.path), slog.Int("line", sc.tornLine), slog.Int("bytes", sc.torn))
		if err := l.f.Truncate(l.size); err != nil {
			return nil, l.fail("open", fmt.Errorf("truncate the partial last line: %w", err))
		}
	}
	if l.size == 0 {
		if err := l.write(headerLine); err != nil {
			return nil, l.fail("open", err)
		}
		if l.sync != SyncNone { // the new file's name, too, must survive a power cut
			if err := syncDir(filepath.Dir(l.path)); err != nil {
				return nil, l.fail("open", err)
			}
		}
	}
	if err := os.WriteFile(l.lockPath, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		log.Warn("cannot record the pid holding the history", slog.Any("error", err), slog.String("file", l.lockPath))
	}
	return sc.entries, nil
}

// lockHolder reads the pid recorded in a lock file ("unknown" if none).
func lockHolder(lockPath string) string {
	b, err := os.ReadFile(lockPath)
	if pid := strings.TrimSpace(string(b)); err == nil && pid != "" {
		return pid
	}
	return "unknown"
}

// write puts b at the end, all or nothing: a failed or short write is
// truncated away (and, if that fails too, before the next write).
func (l *fileLog) write(b []byte) error {
	if l.dirty {
		if err := l.f.Truncate(l.size); err != nil {
			return fmt.Errorf("remove a failed write: %w", err)
		}
		l.dirty = false
	}
	n, err := l.f.WriteAt(b, l.size)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err == nil && l.sync == SyncEntry {
		err = l.f.Sync()
	}
	if err != nil {
		if terr := l.f.Truncate(l.size); terr != nil {
			l.dirty = true
		}
		return err
	}
	l.size += int64(len(b))
	return nil
}

func (l *fileLog) Append(entries ...*messages.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	b, err := encode(entries)
	if err != nil {
		return l.fail("append", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return l.fail("append", ErrClosed)
	}
	if err := checkSeq(l.seq, entries); err != nil {
		return l.fail("append", err)
	}
	if err := l.write(b); err != nil {
		return l.fail("append", err)
	}
	l.seq = entries[len(entries)-1].GetSeq()
	return nil
}

// Sync fsyncs under SyncTurn; under SyncEntry every append already did,
// and under SyncNone nothing does.
func (l *fileLog) Sync() error {
	if l.sync != SyncTurn {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return l.fail("sync", ErrClosed)
	}
	if err := l.f.Sync(); err != nil {
		return l.fail("sync", err)
	}
	return nil
}

func (l *fileLog) Load() ([]*messages.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, l.fail("load", ErrClosed)
	}
	data := make([]byte, l.size)
	if _, err := l.f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, l.fail("load", err)
	}
	sc := parse(data, false)
	if len(sc.problems) > 0 {
		pr := sc.problems[0]
		return nil, &Error{Op: "load", Path: l.path, Line: pr.Line, Err: fmt.Errorf("%w: %v", ErrInvalid, pr.Err)}
	}
	return sc.entries, nil
}

// Close syncs (unless SyncNone), removes the pid record and releases the
// lock.
func (l *fileLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	if l.sync != SyncNone {
		if err := l.f.Sync(); err != nil {
			errs = append(errs, l.fail("close", err))
		}
	}
	if err := os.Remove(l.lockPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, l.fail("close", err))
	}
	if err := l.f.Close(); err != nil {
		errs = append(errs, l.fail("close", err))
	}
	return errors.Join(errs...)
}

// syncDir fsyncs a directory, making the names in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
