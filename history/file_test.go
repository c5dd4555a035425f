package history_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/history/historytest"
	"github.com/musepi/musepi/messages"
)

const header = `{"format":"musepi.history","version":1}` + "\n"

// linesOf renders entries as a file's lines (what FileStore writes).
func linesOf(t *testing.T, entries ...*messages.Entry) string {
	t.Helper()
	var b strings.Builder
	for _, e := range entries {
		line, err := protojson.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Item 1: a torn last line is truncated away with a warning; any other
// invalid content fails the open with an error naming the file, the line
// and the problem, and leaves the file exactly as it was.
func TestFaultInvalidContent(t *testing.T) {
	two := linesOf(t, sample()[:2]...)
	tests := []struct {
		name    string
		content string
		want    int    // entries opened
		wantErr string // substring of the error; "" = opens
		line    int
		after   string // the file after a successful open ("" = unchanged)
	}{
		{name: "today's file, no header", content: two, want: 2},
		{name: "header", content: header + two, want: 2},
		{name: "torn last line", content: header + two + `{"seq":"3","user":{"te`, want: 2, after: header + two},
		{name: "torn line without newline only", content: header + two + `{"seq":"3"}`, want: 2, after: header + two},
		{name: "blank lines ignored", content: header + two + "\n  \n", want: 2},
		{name: "unknown fields kept", content: header + `{"seq":"1","user":{"text":"hi","mood":"sunny"},"futureKind":{"x":1}}` + "\n", want: 1},
		{name: "not JSON", content: header + two + "not json\n", wantErr: "not a history entry", line: 4},
		{name: "corrupt middle line", content: header + "{oops\n" + two, wantErr: "not a history entry", line: 2},
		{name: "wrong type", content: `{"seq":"1","user":{"text":7}}` + "\n", wantErr: "not a history entry", line: 1},
		{name: "duplicate seq", content: header + two + linesOf(t, sample()[1]), wantErr: "seq 2 where 3 was expected", line: 4},
		{name: "seq gap", content: linesOf(t, sample()[0], sample()[2]), wantErr: "seq 3 where 2 was expected", line: 2},
		{name: "newer format", content: `{"format":"musepi.history","version":9}` + "\n" + two, wantErr: "version 9", line: 1},
		{name: "header not first", content: two + header, wantErr: "header after the first line", line: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "s.jsonl")
			writeFile(t, path, tt.content)
			var logs bytes.Buffer
			s := openFile(t, dir, history.WithLogger(slog.New(zerolog.NewSlogHandler(zerolog.New(&logs)))))
			l, got, err := s.Open("s")
			if tt.wantErr != "" {
				var he *history.Error
				if !errors.As(err, &he) || !errors.Is(err, history.ErrInvalid) || he.Path != path || he.Line != tt.line ||
					!strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Open = %v; want a *history.Error (ErrInvalid) for %s line %d: %q", err, path, tt.line, tt.wantErr)
				}
				if after := readFile(t, path); after != tt.content {
					t.Fatalf("a file that failed to open was changed:\n%q\nto\n%q", tt.content, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if len(got) != tt.want {
				t.Fatalf("opened %d entries, want %d", len(got), tt.want)
			}
			want := tt.after
			if want == "" {
				want = tt.content
			}
			if after := readFile(t, path); after != want {
				t.Fatalf("file after open:\n%q\nwant\n%q", after, want)
			}
			if torn := tt.after != ""; torn != strings.Contains(logs.String(), "partial line") {
				t.Errorf("torn=%v but the log says %q", torn, logs.String())
			}
			// Appends go on from the last seq, after everything kept.
			next := &messages.Entry{Seq: uint64(tt.want + 1), Entry: &messages.Entry_User{User: &messages.UserMessage{Text: "next"}}}
			if err := l.Append(next); err != nil {
				t.Fatal(err)
			}
			if after := readFile(t, path); after != want+linesOf(t, next) {
				t.Fatalf("file after append:\n%q", after)
			}
		})
	}
}

// Items 1 and 2: a file that cannot be read, or a directory where it
// cannot be created, fails the open naming the file. Root reads and writes
// whatever the mode, so this needs another user (cmd/musepi's
// TestRPCHistoryPermissions runs the same cases as nobody).
func TestFaultPermissions(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores file modes; TestRPCHistoryPermissions in cmd/musepi covers this as nobody")
	}
	for name, deny := range map[string]func(dir, path string) error{
		"unreadable file":     func(_, path string) error { return os.Chmod(path, 0) },
		"read-only directory": func(dir, path string) error { os.Remove(path); return os.Chmod(dir, 0o500) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "s.jsonl")
			writeFile(t, path, header)
			s := openFile(t, dir)
			if err := deny(dir, path); err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(dir, 0o700)
			_, _, err := s.Open("s")
			var he *history.Error
			if !errors.As(err, &he) || he.Path != path || !errors.Is(err, os.ErrPermission) {
				t.Fatalf("Open = %v", err)
			}
		})
	}
}

// Item 1: a new file starts with the format header.
func TestNewFileHasHeader(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, openFile(t, dir), "s")
	if err := l.Append(sample()[0]); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "s.jsonl")); got != header+linesOf(t, sample()[0]) {
		t.Fatalf("new file:\n%q", got)
	}
}

// Item 2: an append that hits a full disk fails with an error naming the
// file and ENOSPC, leaves nothing of itself in the file, and once there is
// room again the next append goes right after the last good line.
func TestFaultFullDisk(t *testing.T) {
	for _, policy := range []history.Sync{history.SyncTurn, history.SyncEntry, history.SyncNone} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "s.jsonl")
			disk := historytest.NewDisk()
			l, _ := openLog(t, openFile(t, dir, history.WithOpenFile(disk.Open), history.WithSync(policy)), "s")
			all := sample()
			if err := l.Append(all[:2]...); err != nil {
				t.Fatal(err)
			}
			before := readFile(t, path)
			for _, room := range []int64{0, 1, 10, int64(len(linesOf(t, all[2]))) - 1} {
				disk.SetRoom(room)
				err := l.Append(all[2])
				var he *history.Error
				if !errors.As(err, &he) || he.Path != path || he.Op != "append" || !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("Append with %d bytes of room = %v", room, err)
				}
				if after := readFile(t, path); after != before {
					t.Fatalf("a failed append (room %d) left %q", room, strings.TrimPrefix(after, before))
				}
			}
			disk.SetRoom(-1)
			if err := l.Append(all[2:]...); err != nil {
				t.Fatal(err)
			}
			got, err := l.Load()
			if err != nil {
				t.Fatal(err)
			}
			equalEntries(t, got, sample())
		})
	}
}

// Item 2: under SyncEntry a failed fsync undoes the append; under
// SyncTurn, Sync reports a failed fsync; under SyncNone nothing syncs.
func TestFaultSync(t *testing.T) {
	for _, policy := range []history.Sync{history.SyncTurn, history.SyncEntry, history.SyncNone} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			disk := historytest.NewDisk()
			l, _ := openLog(t, openFile(t, dir, history.WithOpenFile(disk.Open), history.WithSync(policy)), "s")
			disk.FailSync(syscall.EIO)
			err := l.Append(sample()[0])
			if (err != nil) != (policy == history.SyncEntry) || err != nil && !errors.Is(err, syscall.EIO) {
				t.Fatalf("Append with failing fsync = %v", err)
			}
			err = l.Sync() // fsyncs only per turn: per entry, the append did
			if (err != nil) != (policy == history.SyncTurn) || err != nil && !errors.Is(err, syscall.EIO) {
				t.Fatalf("Sync with failing fsync = %v", err)
			}
			disk.FailSync(nil)
			if policy == history.SyncEntry { // the failed append left nothing: seq 1 again
				if err := l.Append(sample()[0]); err != nil {
					t.Fatal(err)
				}
			}
			got, err := l.Load()
			if err != nil || len(got) != 1 {
				t.Fatalf("Load = %v, %v; want exactly one entry", got, err)
			}
		})
	}
}

// Item 3: a session has one writer. A second opener (another store on the
// same directory: another runtime, or another process) is refused with the
// holder's pid until the first closes.
func TestFaultSecondWriter(t *testing.T) {
	dir := t.TempDir()
	first, second := openFile(t, dir), openFile(t, dir)
	l, _ := openLog(t, first, "s")
	if err := l.Append(sample()[0]); err != nil {
		t.Fatal(err)
	}
	_, _, err := second.Open("s")
	if !errors.Is(err, history.ErrLocked) || !strings.Contains(err.Error(), "session is open in another process (pid "+itoa(os.Getpid())+")") {
		t.Fatalf("second Open = %v", err)
	}
	if _, _, err := first.Open("s"); !errors.Is(err, history.ErrLocked) {
		t.Fatalf("second Open on the same store = %v", err)
	}
	mem := history.NewMemoryStore()
	openLog(t, mem, "s")
	if _, _, err := mem.Open("s"); !errors.Is(err, history.ErrLocked) {
		t.Fatalf("second Open on a memory store = %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "s.lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid record after Close: %v", err)
	}
	l2, got := openLog(t, second, "s")
	equalEntries(t, got, sample()[:1])
	if err := l2.Append(sample()[1]); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// Item 4: files are created 0600 in a 0700 directory; wider existing
// modes are used with a warning.
func TestPrivateByDefault(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "new", "hist")
	l, _ := openLog(t, openFile(t, dir), "s")
	if err := l.Append(sample()[0]); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "s.jsonl"): 0o600} {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}

	wide := filepath.Join(root, "wide")
	if err := os.Mkdir(wide, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(wide, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wide, "s.jsonl"), header)
	if err := os.Chmod(filepath.Join(wide, "s.jsonl"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	openLog(t, openFile(t, wide, history.WithLogger(slog.New(zerolog.NewSlogHandler(zerolog.New(&logs))))), "s")
	for _, want := range []string{"history directory is accessible to other users", "history file is accessible to other users"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no warning %q in %q", want, logs.String())
		}
	}
}

// Export writes what a FileStore would: the file opens as the session's
// history, and Check finds it whole at the current format version.
func TestExport(t *testing.T) {
	dir := t.TempDir()
	entries := []*messages.Entry{
		{Seq: 1, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: "hello\nthere", TimestampMs: 1700000000000}}},
		{Seq: 2, Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{Model: "m1", StopReason: messages.StopReason_STOP_REASON_STOP,
			Content: []*messages.ContentBlock{{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: "hi"}}}}}}},
	}
	var buf bytes.Buffer
	if err := history.Export(&buf, entries); err != nil {
		t.Fatal(err)
	}
	if want := header + linesOf(t, entries...); buf.String() != want {
		t.Fatalf("Export wrote\n%s\nwant\n%s", buf.String(), want)
	}
	path := filepath.Join(dir, "s.jsonl")
	writeFile(t, path, buf.String())
	rep, err := history.Check(path)
	if err != nil || !rep.OK() || rep.Entries != 2 || rep.Version != history.FormatVersion {
		t.Fatalf("Check = %+v, %v; want 2 entries at version %d", rep, err, history.FormatVersion)
	}
	fs, err := history.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	log, got, err := fs.Open("s")
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	if len(got) != 2 || got[0].GetUser().GetText() != "hello\nthere" || got[1].GetAssistant().GetModel() != "m1" {
		t.Errorf("opened %v, want the entries exported", got)
	}
}
