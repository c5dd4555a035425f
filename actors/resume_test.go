package actors

import (
	"reflect"
	"strings"
	"testing"

	"github.com/musepi/musepi/messages"
)

func user(seq uint64, text string) *messages.Entry {
	return &messages.Entry{Seq: seq, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: text}}}
}

func assistant(seq uint64, msg *messages.AssistantMessage) *messages.Entry {
	return &messages.Entry{Seq: seq, Entry: &messages.Entry_Assistant{Assistant: msg}}
}

func change(seq uint64, to, reason string, pinned bool, cooldownMs int64) *messages.Entry {
	return &messages.Entry{Seq: seq, Entry: &messages.Entry_ModelChange{ModelChange: &messages.ModelChange{
		To: to, Reason: reason, Pinned: pinned, PrimaryCooldownUntilMs: cooldownMs}}}
}

var (
	answered = &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_STOP,
		Content: []*messages.ContentBlock{{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: "a"}}}}}
	failed  = &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR, ErrorMessage: "503"}
	calling = &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_TOOL_USE, Content: []*messages.ContentBlock{
		{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "c1", Name: "ls"}}},
		{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "c2", Name: "cat"}}}}}
)

func known(model string) bool {
	return strings.HasPrefix(model, "p/") || strings.HasPrefix(model, "q/")
}

// describe renders entries as short words for comparison.
func describe(entries []*messages.Entry) string {
	var out []string
	for _, e := range entries {
		switch {
		case e.GetUser() != nil:
			out = append(out, "user")
		case e.GetAssistant() != nil && isFailure(e.GetAssistant()):
			out = append(out, "failed:"+e.GetAssistant().GetStopDetails().GetType())
		case e.GetAssistant() != nil:
			out = append(out, "assistant")
		case e.GetToolResult() != nil:
			out = append(out, "result:"+e.GetToolResult().GetToolCallId())
		case e.GetModelChange() != nil:
			out = append(out, "change")
		default:
			out = append(out, "unknown")
		}
	}
	return strings.Join(out, " ")
}

func TestResume(t *testing.T) {
	tests := []struct {
		name    string
		entries []*messages.Entry
		want    resumed // context compared through describe
		context string
	}{
		{"empty", nil, resumed{primary: "p/m", model: "p/m"}, ""},
		{"failures and changes stay out of the context",
			[]*messages.Entry{user(1, "q"), assistant(2, failed), change(3, "q/f", "fallback", false, 500), assistant(4, answered)},
			resumed{seq: 4, primary: "p/m", model: "q/f", primaryCooldownUntilMs: 500}, "user assistant"},
		{"pinned fallback", []*messages.Entry{change(1, "q/f", "fallback", true, 0)},
			resumed{seq: 1, primary: "p/m", model: "q/f", pinned: true}, ""},
		{"reverted", []*messages.Entry{change(1, "q/f", "fallback", false, 9), change(2, "p/m", "revert", false, 9)},
			resumed{seq: 2, primary: "p/m", model: "p/m", primaryCooldownUntilMs: 9}, ""},
		{"user's model is the primary", []*messages.Entry{change(1, "q/u", "user", false, 0)},
			resumed{seq: 1, primary: "q/u", model: "q/u"}, ""},
		{"unknown provider gives way", []*messages.Entry{change(1, "gone/u", "user", false, 0), change(2, "gone/f", "fallback", true, 0)},
			resumed{seq: 2, primary: "p/m", model: "p/m"}, ""},
		{"an entry kind from a newer version is skipped", []*messages.Entry{user(1, "q"), {Seq: 2}},
			resumed{seq: 2, primary: "p/m", model: "p/m"}, "user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resume(tt.entries, "p/m", known)
			if d := describe(got.context); d != tt.context {
				t.Errorf("context = %q, want %q", d, tt.context)
			}
			got.context = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("resume = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestInterruption(t *testing.T) {
	tests := []struct {
		name    string
		entries []*messages.Entry
		want    string
	}{
		{"empty", nil, ""},
		{"answered", []*messages.Entry{user(1, "q"), assistant(2, answered)}, ""},
		{"failed (settled, or a crash in the backoff)", []*messages.Entry{user(1, "q"), assistant(2, failed)}, ""},
		{"unanswered", []*messages.Entry{user(1, "q")}, "failed:interrupted"},
		{"unanswered, then a model change", []*messages.Entry{user(1, "q"), change(2, "q/f", "fallback", false, 0)}, "failed:interrupted"},
		{"tools running", []*messages.Entry{user(1, "q"), assistant(2, calling)}, "result:c1 result:c2 failed:interrupted"},
		{"tools done, no answer", []*messages.Entry{user(1, "q"), assistant(2, calling), {Seq: 3, Entry: &messages.Entry_ToolResult{
			ToolResult: &messages.ToolResult{ToolCallId: "c1"}}}}, "failed:interrupted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := interruption(tt.entries, "q/f", 42)
			if d := describe(got); d != tt.want {
				t.Fatalf("interruption = %q, want %q", d, tt.want)
			}
			for _, e := range got {
				if a := e.GetAssistant(); a != nil && (a.GetProvider() != "q" || a.GetModel() != "f" || a.GetTimestampMs() != 42 || a.GetErrorMessage() != InterruptedError) {
					t.Errorf("marker %v", a)
				}
				if r := e.GetToolResult(); r != nil && (!r.GetIsError() || r.GetOutput() != InterruptedError) {
					t.Errorf("result %v", r)
				}
			}
		})
	}
}
