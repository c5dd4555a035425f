package rpc

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
)

// A cluster handle's host_lost and resumed (seq 0, made by the handle on
// the client's node) go out as MusePi's own events, their member with
// them, and leave the retry state as it was: the prompt still waits out
// its backoff.
func TestHostLostAndResumedLines(t *testing.T) {
	out := &syncBuffer{}
	s := newServer(t, out)
	tr := &translator{s: s}
	due := time.Now().Add(20 * time.Second)
	s.retryWaiting(1, due)
	for _, ev := range []*messages.SessionEvent{
		{SessionId: "s1", Event: &messages.SessionEvent_HostLost{HostLost: &messages.HostLost{Member: "127.0.0.1:7002"}}},
		{SessionId: "s1", Event: &messages.SessionEvent_Resumed{Resumed: &messages.Resumed{Member: "127.0.0.1:7003"}}},
	} {
		s.writeEvent(tr, wireEvent(ev))
	}
	want := []map[string]any{
		{"type": "host_lost", "sessionId": "s1", "member": "127.0.0.1:7002"},
		{"type": "resumed", "sessionId": "s1", "member": "127.0.0.1:7003"},
	}
	lines := out.lines()
	if len(lines) != len(want) {
		t.Fatalf("lines %q, want %v", lines, want)
	}
	for i, line := range lines {
		var got map[string]any
		if err := json.Unmarshal([]byte(line), &got); err != nil || !reflect.DeepEqual(got, want[i]) {
			t.Errorf("line %d = %s (%v), want %v", i, line, err, want[i])
		}
	}
	s.mu.Lock()
	retry := s.retry
	s.mu.Unlock()
	if retry.attempt != 1 || !retry.at.Equal(due) {
		t.Errorf("after host_lost and resumed the retry wait is %+v; want attempt 1 still due at %v", retry, due)
	}
}

// compaction_end goes out in pi's shape: reason, aborted, willRetry, and
// errorMessage only when the hook failed.
func TestCompactionEndLines(t *testing.T) {
	out := &syncBuffer{}
	s := newServer(t, out)
	tr := &translator{s: s}
	failed := "summary model unavailable"
	for _, ev := range []*messages.SessionEvent{
		{SessionId: "s1", Event: &messages.SessionEvent_CompactionEnd{CompactionEnd: &messages.CompactionEnd{Reason: "overflow", WillRetry: true}}},
		{SessionId: "s1", Event: &messages.SessionEvent_CompactionEnd{CompactionEnd: &messages.CompactionEnd{Reason: "overflow", ErrorMessage: &failed}}},
	} {
		s.writeEvent(tr, wireEvent(ev))
	}
	want := []map[string]any{
		{"type": "compaction_end", "sessionId": "s1", "reason": "overflow", "aborted": false, "willRetry": true},
		{"type": "compaction_end", "sessionId": "s1", "reason": "overflow", "aborted": false, "willRetry": false, "errorMessage": failed},
	}
	lines := out.lines()
	if len(lines) != len(want) {
		t.Fatalf("lines %q, want %v", lines, want)
	}
	for i, line := range lines {
		var got map[string]any
		if err := json.Unmarshal([]byte(line), &got); err != nil || !reflect.DeepEqual(got, want[i]) {
			t.Errorf("line %d = %s (%v), want %v", i, line, err, want[i])
		}
	}
}
