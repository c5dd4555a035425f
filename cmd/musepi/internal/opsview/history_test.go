package opsview

import (
	"bytes"
	"strings"
	"testing"

	"github.com/musepi/musepi/messages"
)

func TestWriteHistory(t *testing.T) {
	at := now.UnixMilli()
	text := func(s string) *messages.ContentBlock {
		return &messages.ContentBlock{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: s}}}
	}
	entries := []*messages.Entry{
		{Seq: 1, Entry: &messages.Entry_ModelChange{ModelChange: &messages.ModelChange{From: "fake/m1", To: "fake/m2", Reason: "user"}}},
		{Seq: 2, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: "two\nlines", TimestampMs: at}}},
		{Seq: 3, Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{Provider: "fake", Model: "m2",
			StopReason: messages.StopReason_STOP_REASON_ERROR, HttpStatus: 503, ErrorMessage: "unavailable", TimestampMs: at + 1500}}},
		{Seq: 4, Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{Provider: "fake", Model: "m2",
			StopReason: messages.StopReason_STOP_REASON_TOOL_USE, TimestampMs: at + 2000, Content: []*messages.ContentBlock{
				{Block: &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{Thinking: "hmm"}}},
				text("let me look"),
				{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "c1", Name: "read", ArgumentsJson: `{"path":"a"}`}}},
			}}}},
		{Seq: 5, Entry: &messages.Entry_ToolResult{ToolResult: &messages.ToolResult{ToolCallId: "c1", Name: "read", Output: "no such file",
			IsError: true, TimestampMs: at + 2100}}},
		{Seq: 6, Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{Provider: "fake", Model: "m2",
			StopReason: messages.StopReason_STOP_REASON_STOP, TimestampMs: at + 3000, Content: []*messages.ContentBlock{text("done")},
			StopDetails: &messages.StopDetails{Type: "refusal"}}}},
		{Seq: 7, Entry: &messages.Entry_ModelChange{ModelChange: &messages.ModelChange{From: "fake/m2", To: "fake/m1", Reason: "fallback",
			Role: "default", Pinned: true}}},
		{Seq: 8}, // a kind this musepi does not know
	}
	var buf bytes.Buffer
	if err := WriteHistory(&buf, entries); err != nil {
		t.Fatal(err)
	}
	want := `
SEQ  TIME                      KIND       CONTENT
1    -                         model      fake/m1 -> fake/m2 (user)
2    2025-03-04T10:00:00.000Z  user       "two\nlines"
3    2025-03-04T10:00:01.500Z  assistant  fake/m2 error (HTTP 503): error "unavailable"
4    2025-03-04T10:00:02.000Z  assistant  fake/m2 tool_use: thinking (3 bytes), "let me look", tool call c1 read {"path":"a"}
5    2025-03-04T10:00:02.100Z  tool       read (call c1) error: "no such file"
6    2025-03-04T10:00:03.000Z  assistant  fake/m2 stop [refusal]: "done"
7    -                         model      fake/m2 -> fake/m1 (fallback, role default, pinned)
8    -                         unknown    -
`
	if got := buf.String(); got != strings.TrimPrefix(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
