package musepi

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/musepi/musepi/messages"
)

// Every event of the wire protocol has a Go type whose Type() is the
// oneof field's name, so a subscriber never misses a kind of event.
func TestEveryWireEventHasAGoType(t *testing.T) {
	oneof := (&messages.SessionEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event")
	fields := oneof.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		ev := &messages.SessionEvent{SessionId: "s", Seq: 7, TimeMs: 1_700_000_000_123}
		r := ev.ProtoReflect()
		r.Set(fd, protoreflect.ValueOfMessage(r.NewField(fd).Message()))
		got, ok := fromWireEvent(ev)
		if !ok {
			t.Errorf("%s: no Go event", fd.Name())
			continue
		}
		h := got.Header()
		if got.Type() != string(fd.Name()) || h.SessionID != "s" || h.Seq != 7 || !h.Time.Equal(time.UnixMilli(1_700_000_000_123)) || h.Wire() != ev {
			t.Errorf("%s: got %T type %q header %+v", fd.Name(), got, got.Type(), h)
		}
	}
}

// Durations and instants arrive as time.Duration and time.Time.
func TestWireEventFields(t *testing.T) {
	ev := &messages.SessionEvent{Event: &messages.SessionEvent_AutoRetryStart{AutoRetryStart: &messages.AutoRetryStart{
		Attempt: 2, MaxAttempts: 10, DelayMs: 1500, ErrorMessage: "429", ErrorClass: "transient", BudgetDelayMs: 500}}}
	got, _ := fromWireEvent(ev)
	want := AutoRetryStart{EventHeader: got.Header(), Attempt: 2, MaxAttempts: 10, Delay: 1500 * time.Millisecond,
		ErrorMessage: "429", ErrorClass: "transient", BudgetDelay: 500 * time.Millisecond}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// Entries cross the boundary both ways unchanged (a compaction hook's
// result, the RPC's messages).
func TestEntriesRoundTrip(t *testing.T) {
	full := &messages.AssistantMessage{
		Content: []*messages.ContentBlock{
			{Block: &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{Thinking: "hmm", Signature: "sig"}}},
			{Block: &messages.ContentBlock_RedactedThinking{RedactedThinking: &messages.RedactedThinkingBlock{Data: "xyz"}}},
			{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: "Hello, "}}},
			{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: "world"}}},
			{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "c1", Name: "ls", ArgumentsJson: `{"dir":"/"}`}}},
		},
		StopReason: messages.StopReason_STOP_REASON_TOOL_USE, ErrorMessage: "", HttpStatus: 200,
		StopDetails: &messages.StopDetails{Type: "refusal", Fields: map[string]string{"category": "x"}},
		Headers:     map[string]string{"retry-after": "3"}, Provider: "p", Model: "m", TimestampMs: 1_700_000_000_000,
		Usage: &messages.Usage{Input: 1, Output: 2, CacheRead: 3, CacheWrite: 4}, ResponseModel: "m-2026",
	}
	entries := []*messages.Entry{
		{Seq: 1, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: "hi", TimestampMs: 1_700_000_000_000}}},
		{Seq: 2, Entry: &messages.Entry_Assistant{Assistant: full}},
		{Seq: 3, Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR, ErrorMessage: "503"}}},
		{Seq: 4, Entry: &messages.Entry_ToolResult{ToolResult: &messages.ToolResult{ToolCallId: "c1", Name: "ls", Output: "a b", IsError: true, TimestampMs: 5}}},
		{Seq: 5, Entry: &messages.Entry_ModelChange{ModelChange: &messages.ModelChange{From: "p/a", To: "p/b", Role: "default", Reason: "fallback", Pinned: true, PrimaryCooldownUntilMs: 9}}},
	}
	goEntries := fromWireEntries(entries)
	a := goEntries[1].Assistant
	if a.Text() != "Hello, world" || a.StopReason != StopReasonToolUse || len(a.ToolCalls()) != 1 || a.ToolCalls()[0].Arguments != `{"dir":"/"}` ||
		*a.Usage != (Usage{1, 2, 3, 4}) || a.ResponseModel != "m-2026" || a.HTTPStatus != 200 || !a.Time.Equal(time.UnixMilli(1_700_000_000_000)) {
		t.Errorf("assistant entry %+v", a)
	}
	back := toWireEntries(goEntries)
	for i := range entries {
		if !proto.Equal(entries[i], back[i]) {
			t.Errorf("entry %d:\n  wire %v\n  back %v", i, entries[i], back[i])
		}
	}
	if !reflect.DeepEqual(fromWireEntries(back), goEntries) {
		t.Error("Go entries changed on a round trip")
	}
}

// A cluster handle's host_lost and resumed carry their member.
func TestHostEventsMember(t *testing.T) {
	lost, _ := fromWireEvent(&messages.SessionEvent{Event: &messages.SessionEvent_HostLost{HostLost: &messages.HostLost{Member: "127.0.0.1:7002"}}})
	resumed, _ := fromWireEvent(&messages.SessionEvent{Event: &messages.SessionEvent_Resumed{Resumed: &messages.Resumed{Member: "127.0.0.1:7003"}}})
	if l, ok := lost.(HostLost); !ok || l.Member != "127.0.0.1:7002" {
		t.Errorf("host_lost = %+v, want HostLost of 127.0.0.1:7002", lost)
	}
	if r, ok := resumed.(Resumed); !ok || r.Member != "127.0.0.1:7003" {
		t.Errorf("resumed = %+v, want Resumed on 127.0.0.1:7003", resumed)
	}
}
