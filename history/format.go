package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/musepi/musepi/messages"
)

// FormatVersion is the version of the file format this package writes: a
// header line {"format":"musepi.history","version":1}, then one protojson
// Entry per line with seq 1, 2, 3, ... Files without the header (written
// before it existed) are read as version 0, the same lines.
const FormatVersion = 1

const formatName = "musepi.history"

// headerLine is the first line of a new history file.
var headerLine = []byte(fmt.Sprintf(`{"format":%q,"version":%d}`+"\n", formatName, FormatVersion))

// Unknown fields (written by a newer version) are skipped when read and
// kept in the file, which is only ever appended to.
var unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}

// Problem is one invalid line of a history file.
type Problem struct {
	Line int // 1-based
	Err  error
}

// scan is what reading a history file found.
type scan struct {
	version  int
	entries  []*messages.Entry
	lines    []int    // the line number of each entry
	raw      [][]byte // each entry's line as written (without '\n')
	end      int64    // length of the complete lines
	torn     int      // bytes of a partial last line after end
	tornLine int      // its line number
	problems []Problem
}

// parse reads a history file's content. It stops at the first problem
// unless all is set (then every problem is listed, and the entries are all
// those that decode, whatever their seq: for check and repair).
func parse(data []byte, all bool) *scan {
	sc := &scan{}
	line := 0
	for off := 0; off < len(data); {
		line++
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			sc.torn, sc.tornLine = len(data)-off, line
			break
		}
		text := data[off : off+nl]
		off += nl + 1
		sc.end = int64(off)
		if len(bytes.TrimSpace(text)) == 0 {
			continue
		}
		if isHeader(text) {
			if sc.header(text, line, all) {
				return sc
			}
			continue
		}
		if sc.entry(text, line, all) {
			return sc
		}
	}
	return sc
}

// header reads a format header found at line, recording its version or
// its problem, and reports whether parse must stop there.
func (sc *scan) header(text []byte, line int, all bool) (stop bool) {
	v, err := parseHeader(text)
	switch {
	case err != nil:
	case line != 1:
		err = errors.New("format header after the first line")
	default:
		sc.version = v
	}
	if err == nil {
		return false
	}
	sc.problems = append(sc.problems, Problem{line, err})
	return !all || v > FormatVersion
}

// entry reads the entry at line, recording it or its problem, and reports
// whether parse must stop there.
func (sc *scan) entry(text []byte, line int, all bool) (stop bool) {
	e := &messages.Entry{}
	if err := unmarshal.Unmarshal(legacyTimestamps(text), e); err != nil {
		sc.problems = append(sc.problems, Problem{line, fmt.Errorf("not a history entry: %v", err)})
		return !all
	}
	if want := sc.lastSeq() + 1; e.GetSeq() != want {
		// Kept in all mode: repair renumbers it.
		sc.problems = append(sc.problems, Problem{line, fmt.Errorf("seq %d where %d was expected", e.GetSeq(), want)})
		if !all {
			return true
		}
	}
	sc.entries = append(sc.entries, e)
	sc.lines = append(sc.lines, line)
	sc.raw = append(sc.raw, text)
	return false
}

// lastSeq is the seq of the last entry read, 0 before the first.
func (sc *scan) lastSeq() uint64 {
	if len(sc.entries) == 0 {
		return 0
	}
	return sc.entries[len(sc.entries)-1].GetSeq()
}

// isHeader reports whether a line is a format header: an object with a
// "format" key (no Entry has one).
func isHeader(line []byte) bool {
	var probe map[string]json.RawMessage
	if json.Unmarshal(line, &probe) != nil {
		return false
	}
	_, ok := probe["format"]
	return ok
}

// errFormatVersion is a header of a version this package cannot read.
var errFormatVersion = errors.New("unknown format version")

// parseHeader returns the version a header line declares.
func parseHeader(line []byte) (int, error) {
	var h struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(line, &h); err != nil {
		return 0, fmt.Errorf("bad format header: %v", err)
	}
	if h.Format != formatName {
		return 0, fmt.Errorf("format %q is not %q", h.Format, formatName)
	}
	if h.Version < 1 || h.Version > FormatVersion {
		return h.Version, fmt.Errorf("%w: version %d, this musepi reads versions up to %d", errFormatVersion, h.Version, FormatVersion)
	}
	return h.Version, nil
}

// Export writes entries as a history file of format version FormatVersion
// holds them: the format header, then one protojson entry per line. Kept
// as HISTORY_DIR/SESSION.jsonl, they open as the session's history
// (FileStore), and Check reads them.
func Export(w io.Writer, entries []*messages.Entry) error {
	b, err := encode(entries)
	if err != nil {
		return err
	}
	if _, err := w.Write(append(slices.Clip(headerLine), b...)); err != nil {
		return fmt.Errorf("history: export: %w", err)
	}
	return nil
}

// encode renders entries as lines.
func encode(entries []*messages.Entry) ([]byte, error) {
	var buf bytes.Buffer
	for _, e := range entries {
		b, err := protojson.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encode entry %d: %w", e.GetSeq(), err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}

// checkSeq fails unless entries continue a history whose last seq is last.
func checkSeq(last uint64, entries []*messages.Entry) error {
	for _, e := range entries {
		if e.GetSeq() != last+1 {
			return fmt.Errorf("%w: appending seq %d after %d", ErrInvalid, e.GetSeq(), last)
		}
		last++
	}
	return nil
}
