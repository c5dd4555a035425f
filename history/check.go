package history

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Report is what Check or Repair found in a history file.
type Report struct {
	Path      string
	Version   int // format version; 0 for a file written before the header
	Entries   int // entries that decode
	TornBytes int // bytes of a partial last line
	Problems  []Problem
}

// OK reports whether the file opens as it is (a partial last line is
// truncated on open, so it does not count).
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Check reads a history file and reports every problem, changing nothing.
func Check(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{Op: "check", Path: path, Err: err}
	}
	return report(path, parse(data, true)), nil
}

func report(path string, sc *scan) *Report {
	return &Report{Path: path, Version: sc.version, Entries: len(sc.entries), TornBytes: sc.torn, Problems: sc.problems}
}

// Repair rewrites a history file so that it opens: the partial last line
// and the lines that do not decode are dropped, seq is renumbered 1..n and
// the format header added. Unknown fields are kept. The original is kept
// as path+".bak" (which must not exist yet). It fails with ErrLocked while
// a session holds the file, and leaves a file it cannot read (a newer
// format version) as it is. The report is of the file before the repair.
func Repair(path string) (*Report, error) {
	fail := func(err error) error { return &Error{Op: "repair", Path: path, Err: err} }
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fail(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			err = fmt.Errorf("%w (pid %s)", ErrLocked, lockHolder(lockPathOf(path)))
		}
		return nil, fail(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fail(err)
	}
	sc := parse(data, true)
	rep := report(path, sc)
	for _, p := range sc.problems {
		if errors.Is(p.Err, errFormatVersion) {
			return rep, &Error{Op: "repair", Path: path, Line: p.Line, Err: p.Err}
		}
	}
	if rep.OK() && rep.TornBytes == 0 && sc.version == FormatVersion {
		return rep, nil
	}
	out := append([]byte(nil), headerLine...)
	for i, raw := range sc.raw {
		line, err := renumber(raw, sc.entries[i].GetSeq(), uint64(i+1))
		if err != nil {
			return rep, &Error{Op: "repair", Path: path, Line: sc.lines[i], Err: err}
		}
		out = append(append(out, line...), '\n')
	}
	if err := writeNew(path+".bak", data); err != nil {
		return rep, fail(fmt.Errorf("keep the original: %w", err))
	}
	if err := replace(path, out); err != nil {
		return rep, fail(err)
	}
	return rep, nil
}

func lockPathOf(path string) string { return path[:len(path)-len(filepath.Ext(path))] + ".lock" }

// renumber sets a line's seq to want, keeping every other field as written.
func renumber(raw []byte, have, want uint64) ([]byte, error) {
	if have == want {
		return raw, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	obj["seq"] = json.RawMessage(strconv.Quote(strconv.FormatUint(want, 10)))
	return json.Marshal(obj)
}

// replace writes data to path through a synced temporary file and a rename.
func replace(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".repair*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// writeNew writes data to a file that must not exist yet.
func writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
