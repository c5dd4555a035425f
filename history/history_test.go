package history_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/history/historytest"
	"github.com/musepi/musepi/messages"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	_ history.Store = (*history.FileStore)(nil)
	_ history.Store = (*history.MemoryStore)(nil)
)

// sample, equalEntries and openLog are the contract suite's.
var (
	sample       = historytest.Sample
	equalEntries = historytest.EqualEntries
	openLog      = historytest.OpenLog
)

func openFile(t *testing.T, dir string, opts ...history.FileOption) *history.FileStore {
	t.Helper()
	s, err := history.OpenFileStore(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// stores gives a fresh store of each kind.
var stores = []struct {
	name string
	open func(t *testing.T) history.Store
}{
	{"file", func(t *testing.T) history.Store { return openFile(t, t.TempDir()) }},
	{"memory", func(*testing.T) history.Store { return history.NewMemoryStore() }},
}

// The file and memory stores pass the history.Store contract.
func TestContract(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { historytest.Contract(t, st.open) })
	}
	t.Run("memory with records", func(t *testing.T) {
		historytest.Contract(t, func(*testing.T) history.Store { return history.NewMemoryStore(history.WithRecords()) })
	})
}

// A memory store made WithRecords passes the history.RecordLog contract;
// without it its Logs keep no record.
func TestRecordContract(t *testing.T) {
	historytest.RecordContract(t, func(*testing.T) history.Store { return history.NewMemoryStore(history.WithRecords()) })
	l, _ := historytest.OpenLog(t, history.NewMemoryStore(), "s")
	if _, ok := l.(history.RecordLog); ok {
		t.Error("a default memory store's Log is a RecordLog")
	}
}

func TestConcurrentSessions(t *testing.T) {
	const sessions, perSession = 16, 20
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := st.open(t)
			var wg sync.WaitGroup
			for i := range sessions {
				wg.Go(func() {
					id := fmt.Sprint("s", i)
					l, _, err := s.Open(id)
					if err != nil {
						t.Error(err)
						return
					}
					defer l.Close()
					for n := range perSession {
						e := &messages.Entry{Seq: uint64(n + 1), Entry: &messages.Entry_User{User: &messages.UserMessage{Text: id}}}
						if err := l.Append(e); err != nil {
							t.Error(err)
							return
						}
						if _, err := l.Load(); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			for i := range sessions {
				id := fmt.Sprint("s", i)
				_, got := openLog(t, s, id)
				if len(got) != perSession {
					t.Fatalf("%s: %d entries, want %d", id, len(got), perSession)
				}
				for n, e := range got {
					if e.GetSeq() != uint64(n+1) || e.GetUser().GetText() != id {
						t.Errorf("%s entry %d = %v", id, n, e)
					}
				}
			}
		})
	}
}

func TestMemoryStoreCopies(t *testing.T) {
	s := history.NewMemoryStore()
	l, _ := openLog(t, s, "s")
	in := sample()
	if err := l.Append(in...); err != nil {
		t.Fatal(err)
	}
	in[0].GetUser().Text = "changed after Append"
	in[1].Seq = 99

	got, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	equalEntries(t, got, sample())
	got[0].GetUser().Text = "changed after Load"
	got[1].GetAssistant().Headers["Retry-After"] = "999"
	got[2] = nil

	again, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	equalEntries(t, again, sample())
}

func TestFileStoreOpenFails(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := history.OpenFileStore(filepath.Join(file, "sub"))
	var he *history.Error
	if !errors.As(err, &he) || he.Path != filepath.Join(file, "sub") {
		t.Errorf("OpenFileStore under a regular file = %v, want a *history.Error naming the directory", err)
	}
}

func TestFileStoreBadSessionID(t *testing.T) {
	for _, id := range []string{"", "../x", ".hidden", "a/b", `a\b`, "a b", "é", strings.Repeat("x", 129)} {
		t.Run(fmt.Sprintf("%.20q", id), func(t *testing.T) {
			s := openFile(t, t.TempDir())
			if _, _, err := s.Open(id); !errors.Is(err, history.ErrBadSessionID) {
				t.Errorf("Open = %v, want ErrBadSessionID", err)
			}
		})
	}
}

func TestValidSessionID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"a", true},
		{"Sess_1-2.jsonl", true},
		{"a..b", true},
		{strings.Repeat("x", 128), true},
		{strings.Repeat("x", 129), false},
		{"", false},
		{".", false},
		{"..", false},
		{".hidden", false},
		{"../x", false},
		{"a/b", false},
		{"a\x00b", false},
		{"a:b", false},
	}
	for _, tt := range tests {
		if got := history.ValidSessionID(tt.id); got != tt.want {
			t.Errorf("ValidSessionID(%.20q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

// Files written before the pi wire format name timestamps "timestampMs";
// they load as before, and new lines are written with "timestamp".
func TestFileStoreReadsLegacyTimestamps(t *testing.T) {
	dir := t.TempDir()
	legacy := `{"seq":"1","user":{"text":"say \"timestampMs\": 1","timestampMs":"1700000000000"}}` + "\n" +
		`{"seq":"2","assistant":{"stopReason":"STOP_REASON_STOP","timestampMs":"1700000000001"}}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "old.jsonl"), []byte(legacy), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openFile(t, dir)
	old, got, err := s.Open("old")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	equalEntries(t, got, []*messages.Entry{
		{Seq: 1, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: `say "timestampMs": 1`, TimestampMs: 1700000000000}}},
		{Seq: 2, Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{
			StopReason: messages.StopReason_STOP_REASON_STOP, TimestampMs: 1700000000001}}},
	})
	fresh, _, err := s.Open("new")
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Append(got[0]); err != nil {
		t.Fatal(err)
	}
	if err := fresh.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "new.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"timestamp":"1700000000000"`) || strings.Contains(string(data), `"timestampMs":"`) {
		t.Errorf("new line = %s, want the key \"timestamp\"", data)
	}
}

// A memory history keeps its entries in chunks of growing size: entries of
// every size, some larger than a chunk, come back in order after a
// reopen.
func TestMemoryStoreManyEntries(t *testing.T) {
	s := history.NewMemoryStore()
	l, _ := openLog(t, s, "s")
	var want []*messages.Entry
	for i := range 300 {
		text := strings.Repeat("x", (i*37)%700)
		if i%50 == 7 {
			text = strings.Repeat("y", 10_000) // more than the largest chunk
		}
		e := &messages.Entry{Seq: uint64(i + 1), Entry: &messages.Entry_User{User: &messages.UserMessage{Text: text}}}
		if err := l.Append(e); err != nil {
			t.Fatal(err)
		}
		want = append(want, e)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_, got := openLog(t, s, "s")
	equalEntries(t, got, want)
}

// A batch that cannot be encoded (a string that is not UTF-8) leaves a
// memory history as it was, all or none, also when the batch spilled
// into a new chunk before the entry that failed; appends go on after it.
func TestMemoryStoreFailedBatchLeavesNothing(t *testing.T) {
	user := func(seq uint64, text string) *messages.Entry {
		return &messages.Entry{Seq: seq, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: text}}}
	}
	s := history.NewMemoryStore()
	l, _ := openLog(t, s, "s")
	want := []*messages.Entry{user(1, "kept")}
	if err := l.Append(want...); err != nil {
		t.Fatal(err)
	}
	bad := []*messages.Entry{user(2, strings.Repeat("z", 300)), user(3, "\xff not UTF-8")} // the first spills past the first chunk
	if err := l.Append(bad...); err == nil {
		t.Fatal("appending a string that is not UTF-8 should fail")
	}
	want = append(want, user(2, "after the failure"))
	if err := l.Append(want[1]); err != nil {
		t.Fatal(err)
	}
	got, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	equalEntries(t, got, want)
}
