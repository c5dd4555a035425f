package overload

import (
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
)

func TestOutcomeOf(t *testing.T) {
	failed := func(text string, status int32) *messages.AssistantMessage {
		return &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR, ErrorMessage: text, HttpStatus: status}
	}
	streamed := failed(`overloaded_error: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 0)
	streamed.Content = []*messages.ContentBlock{{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: "half an answer"}}}}
	for _, tc := range []struct {
		name string
		msg  *messages.AssistantMessage
		want Result
	}{
		{"answered", &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_STOP}, Answered},
		{"answered with tool calls", &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_TOOL_USE}, Answered},
		{"529", failed("529 : Overloaded", 529), Overloaded},
		{"anthropic 529 body", failed(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 529), Overloaded},
		{"503", failed("503 Service Unavailable", 503), Overloaded},
		{"openai 500 overloaded", failed("500 Internal Server Error: The server is overloaded or not ready yet.", 500), Overloaded},
		{"overloaded_error in a stream", failed(`stream error: {"type":"overloaded_error","message":"Overloaded"}`, 0), Overloaded},
		{"overloaded_error after content", streamed, Overloaded},
		{"500 internal error", failed("500 Internal Server Error: internal error", 500), Neutral},
		{"502", failed("502 Bad Gateway", 502), Neutral},
		{"504", failed("504 Gateway Timeout", 504), TimedOut},
		{"408", failed("408 Request Timeout", 408), TimedOut},
		{"client time-out", failed("Request timed out.", 0), TimedOut},
		{"deadline", failed(`Post "https://api.openai.com/v1/chat/completions": context deadline exceeded`, 0), TimedOut},
		{"stalled stream", failed("stream stalled: no event for 60s", 0), TimedOut},
		{"429", failed("429 Too Many Requests: rate limit exceeded", 429), Neutral},
		{"429 resource exhausted", failed("429 Too Many Requests: RESOURCE_EXHAUSTED", 429), Neutral},
		{"usage limit", failed("You have exhausted your capacity for this billing period", 0), Neutral},
		{"bad request", failed("400 Bad Request: invalid model", 400), Neutral},
		{"network", failed("connection refused", 0), Neutral},
		{"aborted", &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ABORTED, ErrorMessage: "Request was aborted"}, Neutral},
		{"aborted mid time-out", &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ABORTED, ErrorMessage: "timed out"}, Neutral},
		{"no message", nil, Neutral},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := OutcomeOf(tc.msg, 300*time.Millisecond)
			if got.Result != tc.want {
				t.Fatalf("OutcomeOf = %v, want %v", got.Result, tc.want)
			}
			if want := 300 * time.Millisecond; (got.FirstToken == want) != (tc.want == Answered) {
				t.Errorf("FirstToken = %v: only an answer carries it", got.FirstToken)
			}
		})
	}
}
