// Package provider defines how a session talks to an LLM: a streaming call
// that delivers deltas and ends in one assistant message. Real adapters live
// beside the Scripted provider used by tests and simulations.
package provider

import (
	"context"

	"github.com/musepi/musepi/messages"
)

// Request is one turn sent to a provider. Its Context and Tools are
// shared with the session and its other turns: a provider only reads them.
type Request struct {
	SessionID  string
	Model      string            // model id within the provider ("gpt-4o")
	Credential string            // credential name chosen by the credential actor
	APIKey     string            // the credential's key, if any
	Context    []*messages.Entry // the context, oldest first
	Tools      []ToolSpec
	// Thinking is the session's thinking level; adapters map it to their
	// API's reasoning setting (off: none sent).
	Thinking ThinkingLevel
}

// ToolSpec describes a tool the model may call.
type ToolSpec struct {
	Name        string
	Description string
	SchemaJSON  string // JSON schema of the arguments object
}

// Delta is a piece of streamed output.
type Delta struct {
	Kind string // "text", "thinking", "tool_call"
	Text string
}

// Provider streams one turn. Stream calls onDelta for each piece of output
// and returns the final assistant message; it never returns nil. Failures
// are messages with StopReason ERROR (HTTP status, headers, error text set);
// when ctx is cancelled by the caller the stream stops at once and the
// message has StopReason ABORTED. A message whose call got an HTTP response
// carries in RateLimits the limits the response's headers announced
// (RateLimitsOf), on success and failure alike; it is transient, for the
// credential's pacing, and not part of the conversation. Implementations
// are safe for concurrent use by many sessions.
type Provider interface {
	Stream(ctx context.Context, req Request, onDelta func(Delta)) *messages.AssistantMessage
	// ResetSession drops any state cached for the session (such as an OpenAI
	// previous_response_id), after a stale-replay error.
	ResetSession(sessionID string)
}

// Aborted is the message a provider returns when the caller cancelled.
func Aborted(partial []*messages.ContentBlock) *messages.AssistantMessage {
	return &messages.AssistantMessage{
		Content:      partial,
		StopReason:   messages.StopReason_STOP_REASON_ABORTED,
		ErrorMessage: "Request was aborted",
	}
}

// Text returns an assistant message holding text that stopped normally.
func Text(text string) *messages.AssistantMessage {
	return &messages.AssistantMessage{
		Content:    []*messages.ContentBlock{{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: text}}}},
		StopReason: messages.StopReason_STOP_REASON_STOP,
	}
}

// Failure returns an error message with an HTTP status and headers.
func Failure(status int, text string, headers map[string]string) *messages.AssistantMessage {
	return &messages.AssistantMessage{
		StopReason:   messages.StopReason_STOP_REASON_ERROR,
		ErrorMessage: text,
		HttpStatus:   int32(status),
		Headers:      headers,
	}
}

// OutputBounded is a provider that says the output bound (max_tokens) of
// its turns, which pacing reserves from its keys' token limits (0: none
// set; pacing then reserves what its answers use).
type OutputBounded interface {
	MaxOutputTokens() int64
}

// OutputRefunder is a provider whose server gives back, once a call ends,
// the output its max_tokens reserved at admission and it did not use
// (Anthropic: "OTPM rate limits are estimated based on max_tokens at the
// beginning of each request and adjusted at the end"). OpenAI charges
// max_tokens at admission and gives nothing back.
type OutputRefunder interface {
	RefundsUnusedOutput() bool
}
