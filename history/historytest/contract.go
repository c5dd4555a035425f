package historytest

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
)

// Sample is one entry of every kind, with Seq set from 1.
func Sample() []*messages.Entry {
	return []*messages.Entry{
		{Seq: 1, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: "hi\nthere \"you\"", TimestampMs: 1700000000000}}},
		{Seq: 2, Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{
			Content: []*messages.ContentBlock{
				{Block: &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{Thinking: "hmm", Signature: "sig"}}},
				{Block: &messages.ContentBlock_RedactedThinking{RedactedThinking: &messages.RedactedThinkingBlock{Data: "xyz"}}},
				{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: "héllo ✓ \x00"}}},
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

// EqualEntries fails t unless got and want hold equal entries in order.
func EqualEntries(t testing.TB, got, want []*messages.Entry) {
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

// OpenLog opens session in s and closes it at the end of the test.
func OpenLog(t testing.TB, s history.Store, session string) (history.Log, []*messages.Entry) {
	t.Helper()
	l, entries, err := s.Open(session)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, entries
}

// Contract runs the history.Store contract every store passes on stores
// from open (a fresh one per subtest): entries come back as appended,
// across sessions and reopening; a closed log or store fails with
// ErrClosed.
func Contract(t *testing.T, open func(t *testing.T) history.Store) {
	t.Run("round trip", func(t *testing.T) { storeRoundTrip(t, open(t)) })
	t.Run("closed", func(t *testing.T) { storeClosed(t, open(t)) })
}

// storeRoundTrip checks that entries appended in parts come back, next to
// another session's, from the open log and after reopening.
func storeRoundTrip(t *testing.T, s history.Store) {
	all := Sample()
	l, got := OpenLog(t, s, "sess-1")
	if len(got) != 0 {
		t.Fatalf("a new session opened with %v", got)
	}
	for _, part := range [][]*messages.Entry{all[:2], all[2:3], all[3:], nil} {
		if err := l.Append(part...); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	other, _ := OpenLog(t, s, "other")
	if err := other.Append(all[0]); err != nil {
		t.Fatal(err)
	}
	got, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	EqualEntries(t, got, Sample())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_, got = OpenLog(t, s, "sess-1")
	EqualEntries(t, got, Sample())
}

// storeClosed checks that a closed log, and a closed store, fail with
// ErrClosed.
func storeClosed(t *testing.T, s history.Store) {
	l, _ := OpenLog(t, s, "s")
	if err := l.Append(Sample()[0]); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(Sample()[1]); !errors.Is(err, history.ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
	if _, err := l.Load(); !errors.Is(err, history.ErrClosed) {
		t.Errorf("Load after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Open("s"); !errors.Is(err, history.ErrClosed) {
		t.Errorf("Open after the store's Close = %v, want ErrClosed", err)
	}
}

// RecordContract runs the history.RecordLog contract on stores from open
// (a fresh one per subtest), whose Logs must be RecordLogs: a record and
// entries are committed together and come back after reopening; a commit
// whose entries do not continue the history writes neither; a new
// record replaces the old one; a closed log fails with ErrClosed.
func RecordContract(t *testing.T, open func(t *testing.T) history.Store) {
	t.Run("round trip", func(t *testing.T) { recordRoundTrip(t, open(t)) })
	t.Run("all or nothing", func(t *testing.T) { recordAllOrNothing(t, open(t)) })
	t.Run("closed", func(t *testing.T) { recordClosed(t, open(t)) })
}

// openRecordLog opens session in s like OpenLog, failing t unless its
// Log is a history.RecordLog.
func openRecordLog(t testing.TB, s history.Store, session string) (history.RecordLog, []*messages.Entry) {
	t.Helper()
	l, entries := OpenLog(t, s, session)
	rl, ok := l.(history.RecordLog)
	if !ok {
		t.Fatalf("%T is not a history.RecordLog", l)
	}
	return rl, entries
}

// recordRoundTrip checks that records and entries committed together come
// back after reopening, and that a new record replaces the old one.
func recordRoundTrip(t *testing.T, s history.Store) {
	due := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	l, _ := openRecordLog(t, s, "sess-1")
	if _, found, err := l.LastRecord(); err != nil || found {
		t.Fatalf("a new session's record: found %v, %v", found, err)
	}
	all := Sample()
	if err := l.CommitRecord(history.Record{Data: []byte("first"), Due: due}, all[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := l.CommitRecord(history.Record{Data: []byte("second")}, all[2:]...); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, got := openRecordLog(t, s, "sess-1")
	EqualEntries(t, got, Sample())
	rec, found, err := l.LastRecord()
	if err != nil || !found || string(rec.Data) != "second" || !rec.Due.IsZero() {
		t.Fatalf("record = %q due %v, found %v, %v; want \"second\", no due time", rec.Data, rec.Due, found, err)
	}
	if err := l.CommitRecord(history.Record{Data: []byte("third"), Due: due}); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := l.LastRecord(); string(rec.Data) != "third" || !rec.Due.Equal(due) {
		t.Fatalf("record = %q due %v, want \"third\" due %v", rec.Data, rec.Due, due)
	}
}

// recordAllOrNothing checks that a commit whose entries do not continue
// the history writes neither them nor its record.
func recordAllOrNothing(t *testing.T, s history.Store) {
	l, _ := openRecordLog(t, s, "s")
	all := Sample()
	if err := l.CommitRecord(history.Record{Data: []byte("kept")}, all[0]); err != nil {
		t.Fatal(err)
	}
	if err := l.CommitRecord(history.Record{Data: []byte("lost")}, all[2]); !errors.Is(err, history.ErrInvalid) {
		t.Fatalf("commit of seq 3 after 1 = %v, want ErrInvalid", err)
	}
	got, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	EqualEntries(t, got, all[:1])
	if rec, _, _ := l.LastRecord(); string(rec.Data) != "kept" {
		t.Fatalf("record = %q after a failed commit, want \"kept\"", rec.Data)
	}
}

// recordClosed checks that a closed record log fails with ErrClosed.
func recordClosed(t *testing.T, s history.Store) {
	l, _ := openRecordLog(t, s, "s")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.CommitRecord(history.Record{Data: []byte("x")}); !errors.Is(err, history.ErrClosed) {
		t.Errorf("CommitRecord after Close = %v, want ErrClosed", err)
	}
	if _, _, err := l.LastRecord(); !errors.Is(err, history.ErrClosed) {
		t.Errorf("LastRecord after Close = %v, want ErrClosed", err)
	}
}
