package history

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/musepi/musepi/messages"
)

// FileStore keeps one JSON-lines file per session in a directory: each line
// is one Entry in protojson. Appends open the file in append mode and close
// it again, so no descriptor is held per idle session, and a crash loses at
// most the line being written; Load skips a torn last line.
type FileStore struct {
	dir    string
	mu     sync.Mutex
	closed bool
}

// OpenFileStore opens (creating) a store in dir.
func OpenFileStore(dir string) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("history: open %s: %w", dir, err)
	}
	return &FileStore{dir: dir}, nil
}

func (s *FileStore) path(session string) (string, error) {
	if !ValidSessionID(session) {
		return "", fmt.Errorf("%w: %q", ErrBadSessionID, session)
	}
	return filepath.Join(s.dir, session+".jsonl"), nil
}

// Append writes entries as lines at the end of the session's file.
func (s *FileStore) Append(session string, entries ...*messages.Entry) error {
	p, err := s.path(session)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	for _, e := range entries {
		b, err := protojson.Marshal(e)
		if err != nil {
			return fmt.Errorf("history: encode entry of %s: %w", session, err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := dropTornLine(p); err != nil {
		return fmt.Errorf("history: append to %s: %w", session, err)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("history: append to %s: %w", session, err)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return fmt.Errorf("history: append to %s: %w", session, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("history: append to %s: %w", session, err)
	}
	return nil
}

// dropTornLine truncates a partial last line left by a crash mid-write, so
// that the next append starts on a line of its own.
func dropTornLine(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || info.Size() == 0 {
		return err
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, info.Size()-1); err != nil {
		return err
	}
	if last[0] == '\n' {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return f.Truncate(int64(bytes.LastIndexByte(data, '\n') + 1))
}

// Load reads the session's file; a missing file is an empty history.
func (s *FileStore) Load(session string) ([]*messages.Entry, error) {
	p, err := s.path(session)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("history: load %s: %w", session, err)
	}
	var out []*messages.Entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), len(data)+1)
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		e := &messages.Entry{}
		if err := protojson.Unmarshal(legacyTimestamps(sc.Bytes()), e); err != nil {
			if !bytes.HasSuffix(data, []byte("\n")) && isLastLine(data, sc.Bytes()) {
				break // a torn last line from a crash mid-write
			}
			return nil, fmt.Errorf("history: %s line %d: %w", p, line, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
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

func isLastLine(data, line []byte) bool { return bytes.HasSuffix(data, line) }

// Close marks the store closed; every append has already reached the file.
func (s *FileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
