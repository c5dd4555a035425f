package anthropic

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/musepi/musepi/messages"
)

func user(text string) *messages.Entry {
	return &messages.Entry{Entry: &messages.Entry_User{User: &messages.UserMessage{Text: text}}}
}

func assistant(provider string, stop messages.StopReason, blocks ...*messages.ContentBlock) *messages.Entry {
	return &messages.Entry{Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{
		Content: blocks, StopReason: stop, Provider: provider}}}
}

func toolResult(id, output string, isError bool) *messages.Entry {
	return &messages.Entry{Entry: &messages.Entry_ToolResult{ToolResult: &messages.ToolResult{
		ToolCallId: id, Name: "tool", Output: output, IsError: isError}}}
}

func text(s string) *messages.ContentBlock {
	return &messages.ContentBlock{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: s}}}
}

func thinking(s, sig string) *messages.ContentBlock {
	return &messages.ContentBlock{Block: &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{Thinking: s, Signature: sig}}}
}

func redacted(d string) *messages.ContentBlock {
	return &messages.ContentBlock{Block: &messages.ContentBlock_RedactedThinking{RedactedThinking: &messages.RedactedThinkingBlock{Data: d}}}
}

func toolCall(id, name, args string) *messages.ContentBlock {
	return &messages.ContentBlock{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: id, Name: name, ArgumentsJson: args}}}
}

// TestRequestMapping checks the messages sent for a context, as
// decoded from the request body the server received.
func TestRequestMapping(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		writeEvents(w, textStream("end_turn", "ok")...)
	})
	req := userRequest("")
	req.Context = []*messages.Entry{
		user("first"),
		assistant("anthropic", messages.StopReason_STOP_REASON_TOOL_USE,
			thinking("hmm", "sig1"), redacted("ENC"), text("calling"), text(""),
			toolCall("toolu_1", "read", `{"p":1}`), toolCall("call|2", "ls", "")),
		{Entry: &messages.Entry_ModelChange{ModelChange: &messages.ModelChange{From: "a", To: "b", Reason: "fallback"}}},
		toolResult("toolu_1", "one", false),
		toolResult("call|2", "", true),
		user("next"),
		// A failed turn keeps its text only.
		assistant("anthropic", messages.StopReason_STOP_REASON_ERROR,
			thinking("half", "badsig"), text("partial"), toolCall("toolu_x", "read", `{"p":`)),
		// Another provider's thinking is replayed as text; its redacted thinking is dropped.
		assistant("openai", messages.StopReason_STOP_REASON_STOP, thinking("reasoning", "rs_abc"), redacted("OAI"), text("hi")),
		toolResult("nope", "orphan", false),
		assistant("", messages.StopReason_STOP_REASON_TOOL_USE, toolCall("t3", "bash", `{"cmd":"ls"}`)),
		user("go on"),
		assistant("anthropic", messages.StopReason_STOP_REASON_ERROR),
		user(""),
	}
	msg, _ := stream(t, newProvider(t, s.URL, Config{}), req)
	if msg.GetStopReason() != messages.StopReason_STOP_REASON_STOP {
		t.Fatalf("stream failed: %q", msg.GetErrorMessage())
	}

	raw, _ := json.Marshal(s.lastBody(t)["messages"])
	var got []map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"role": "user", "content": []any{map[string]any{"type": "text", "text": "first"}}},
		{"role": "assistant", "content": []any{
			map[string]any{"type": "thinking", "thinking": "hmm", "signature": "sig1"},
			map[string]any{"type": "redacted_thinking", "data": "ENC"},
			map[string]any{"type": "text", "text": "calling"},
			map[string]any{"type": "tool_use", "id": "toolu_1", "name": "read", "input": map[string]any{"p": float64(1)}},
			map[string]any{"type": "tool_use", "id": "call_2", "name": "ls", "input": map[string]any{}},
		}},
		{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": []any{map[string]any{"type": "text", "text": "one"}}},
			map[string]any{"type": "tool_result", "tool_use_id": "call_2", "is_error": true},
		}},
		{"role": "user", "content": []any{map[string]any{"type": "text", "text": "next"}}},
		{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": "partial"}}},
		{"role": "assistant", "content": []any{
			map[string]any{"type": "text", "text": "reasoning"},
			map[string]any{"type": "text", "text": "hi"},
		}},
		{"role": "assistant", "content": []any{
			map[string]any{"type": "tool_use", "id": "t3", "name": "bash", "input": map[string]any{"cmd": "ls"}},
		}},
		{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": "t3", "is_error": true,
				"content": []any{map[string]any{"type": "text", "text": missingToolResult}}},
		}},
		{"role": "user", "content": []any{map[string]any{"type": "text", "text": "go on"}}},
	}
	if !reflect.DeepEqual(got, want) {
		gotJSON, _ := json.MarshalIndent(got, "", "  ")
		t.Fatalf("messages =\n%s", gotJSON)
	}
}
