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
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	_ history.Store = (*history.FileStore)(nil)
	_ history.Store = (*history.MemoryStore)(nil)
)

// sample is one entry of every kind, with Seq set.
func sample() []*messages.Entry {
	return []*messages.Entry{
		{Seq: 1, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: "hi\nthere \"you\"", TimestampMs: 1700000000000}}},
		{Seq: 2, Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{
			Content: []*messages.ContentBlock{
				{Block: &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{Thinking: "hmm", Signature: "sig"}}},
				{Block: &messages.ContentBlock_RedactedThinking{RedactedThinking: &messages.RedactedThinkingBlock{Data: "xyz"}}},
				{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: "héllo ✓"}}},
				{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "t1", Name: "ls", ArgumentsJson: `{"dir":"/"}`}}},
			},
			StopReason:   messages.StopReason_STOP_REASON_ERROR,
			ErrorMessage: "overloaded",
			StopDetails:  &messages.StopDetails{Type: "refusal", Fields: map[string]string{"category": "cyber"}},
			HttpStatus:   529,
			Headers:      map[string]string{"Retry-After": "3", "x-request-id": "req_1"},
			Provider:     "p",
			Model:        "m",
			TimestampMs:  1700000000001,
		}}},
		{Seq: 3, Entry: &messages.Entry_ToolResult{ToolResult: &messages.ToolResult{ToolCallId: "t1", Name: "ls", Output: "a\nb", IsError: true}}},
		{Seq: 4, Entry: &messages.Entry_ModelChange{ModelChange: &messages.ModelChange{From: "p/m", To: "q/n", Role: "main", Reason: "fallback"}}},
		{Seq: 5}, // no payload
	}
}

func equalEntries(t *testing.T, got, want []*messages.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("entry %d:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
}

func openFile(t *testing.T, dir string) *history.FileStore {
	t.Helper()
	s, err := history.OpenFileStore(dir)
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

func TestRoundTrip(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := st.open(t)
			all := sample()
			if err := s.Append("sess-1", all[:2]...); err != nil {
				t.Fatal(err)
			}
			if err := s.Append("sess-1", all[2]); err != nil {
				t.Fatal(err)
			}
			if err := s.Append("sess-1", all[3:]...); err != nil {
				t.Fatal(err)
			}
			if err := s.Append("sess-1"); err != nil { // nothing to append
				t.Fatal(err)
			}
			if err := s.Append("other", all[0]); err != nil {
				t.Fatal(err)
			}
			got, err := s.Load("sess-1")
			if err != nil {
				t.Fatal(err)
			}
			equalEntries(t, got, sample())
			got, err = s.Load("other")
			if err != nil {
				t.Fatal(err)
			}
			equalEntries(t, got, sample()[:1])
		})
	}
}

func TestLoadMissingSessionIsEmpty(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			got, err := st.open(t).Load("never")
			if err != nil || len(got) != 0 {
				t.Errorf("Load = %v, %v; want empty, nil", got, err)
			}
		})
	}
}

func TestClosedStore(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := st.open(t)
			if err := s.Append("s", sample()[0]); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Append("s", sample()[1]); !errors.Is(err, history.ErrClosed) {
				t.Errorf("Append after Close = %v, want ErrClosed", err)
			}
			if _, err := s.Load("s"); !errors.Is(err, history.ErrClosed) {
				t.Errorf("Load after Close = %v, want ErrClosed", err)
			}
		})
	}
}

func TestConcurrentAppends(t *testing.T) {
	const sessions, perSession = 16, 20
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := st.open(t)
			var wg sync.WaitGroup
			for i := range sessions {
				wg.Go(func() {
					id := fmt.Sprint("s", i)
					for n := range perSession {
						e := &messages.Entry{Seq: uint64(n + 1), Entry: &messages.Entry_User{User: &messages.UserMessage{Text: id}}}
						if err := s.Append(id, e); err != nil {
							t.Error(err)
							return
						}
						if _, err := s.Load(id); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			for i := range sessions {
				id := fmt.Sprint("s", i)
				got, err := s.Load(id)
				if err != nil {
					t.Fatal(err)
				}
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
	in := sample()
	if err := s.Append("s", in...); err != nil {
		t.Fatal(err)
	}
	in[0].GetUser().Text = "changed after Append"
	in[1].Seq = 99

	got, err := s.Load("s")
	if err != nil {
		t.Fatal(err)
	}
	equalEntries(t, got, sample())
	got[0].GetUser().Text = "changed after Load"
	got[1].GetAssistant().Headers["Retry-After"] = "999"
	got[2] = nil

	again, err := s.Load("s")
	if err != nil {
		t.Fatal(err)
	}
	equalEntries(t, again, sample())
}

func TestFileStoreReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "dir") // created on open
	s := openFile(t, dir)
	if err := s.Append("s", sample()[:3]...); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openFile(t, dir)
	if err := s2.Append("s", sample()[3:]...); err != nil {
		t.Fatal(err)
	}
	got, err := s2.Load("s")
	if err != nil {
		t.Fatal(err)
	}
	equalEntries(t, got, sample())
}

func TestFileStoreOpenFails(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := history.OpenFileStore(filepath.Join(file, "sub")); err == nil {
		t.Error("OpenFileStore under a regular file succeeded")
	}
}

// writeRaw appends raw bytes to session's file in dir.
func writeRaw(t *testing.T, dir, session, raw string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, session+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(raw); err != nil {
		t.Fatal(err)
	}
}

func TestFileStoreDamagedFile(t *testing.T) {
	tests := []struct {
		name    string
		raw     string // appended after the first two sample entries
		want    int    // entries loaded
		wantErr string // substring of the error, if any
	}{
		{"torn last line", `{"seq":"3","user":{"te`, 2, ""},
		{"blank lines ignored", "\n  \n", 2, ""},
		{"corrupt line with newline", "not json\n", 0, "line 3"},
		{"corrupt middle line", "{oops\n{\"seq\":\"9\"}\n", 0, "line 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openFile(t, dir)
			if err := s.Append("s", sample()[:2]...); err != nil {
				t.Fatal(err)
			}
			writeRaw(t, dir, "s", tt.raw)
			got, err := s.Load("s")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Load error = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			equalEntries(t, got, sample()[:tt.want])
		})
	}
}

// After a crash tore the last line, the store keeps working: the next
// append must not glue itself onto the torn line.
func TestFileStoreAppendAfterTornLine(t *testing.T) {
	dir := t.TempDir()
	s := openFile(t, dir)
	if err := s.Append("s", sample()[:2]...); err != nil {
		t.Fatal(err)
	}
	writeRaw(t, dir, "s", `{"seq":"3","us`)
	if err := s.Append("s", sample()[2]); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load("s")
	if err != nil {
		t.Fatal(err)
	}
	equalEntries(t, got, sample()[:3])
}

func TestFileStoreBadSessionID(t *testing.T) {
	for _, id := range []string{"", "../x", ".hidden", "a/b", `a\b`, "a b", "é", strings.Repeat("x", 129), strings.Repeat("x", 200)} {
		t.Run(fmt.Sprintf("%.20q", id), func(t *testing.T) {
			s := openFile(t, t.TempDir())
			if err := s.Append(id, sample()[0]); !errors.Is(err, history.ErrBadSessionID) {
				t.Errorf("Append = %v, want ErrBadSessionID", err)
			}
			if _, err := s.Load(id); !errors.Is(err, history.ErrBadSessionID) {
				t.Errorf("Load = %v, want ErrBadSessionID", err)
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
	got, err := s.Load("old")
	if err != nil {
		t.Fatal(err)
	}
	equalEntries(t, got, []*messages.Entry{
		{Seq: 1, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: `say "timestampMs": 1`, TimestampMs: 1700000000000}}},
		{Seq: 2, Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{
			StopReason: messages.StopReason_STOP_REASON_STOP, TimestampMs: 1700000000001}}},
	})
	if err := s.Append("new", got[0]); err != nil {
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
