package musepi

import (
	"strings"
	"time"
)

// StopReason says how a turn ended.
type StopReason string

// How a turn ends.
const (
	StopReasonStop    StopReason = "stop"     // the model finished normally
	StopReasonToolUse StopReason = "tool_use" // the model asked for tool calls
	StopReasonLength  StopReason = "length"   // the output token limit was reached
	StopReasonError   StopReason = "error"    // the call failed; ErrorMessage says why
	StopReasonAborted StopReason = "aborted"  // the call was aborted
)

// AssistantMessage is what one turn of the model produced: the answer of
// a prompt, a failed turn, or an entry of the history.
type AssistantMessage struct {
	// Content is the message's blocks in order: TextBlock, ThinkingBlock,
	// RedactedThinkingBlock and ToolCall values.
	Content      []Block
	StopReason   StopReason
	ErrorMessage string // why the turn failed ("" unless StopReason is error or aborted)
	// StopDetails is the provider's typed reason for the stop (nil: none).
	StopDetails *StopDetails
	HTTPStatus  int               // of the provider's response (0: none given)
	Headers     map[string]string // the response headers, names as received
	Provider    string            // the provider that answered
	Model       string            // the model id within the provider
	Time        time.Time         // when the turn ended (zero: unknown)
	// ResponseModel is the model the provider's response named
	// ("gpt-4o-2024-08-06" for "gpt-4o"; "": it named none).
	ResponseModel string
	// Usage is the turn's token count (nil: the provider reported none).
	Usage *Usage
}

// Text is the message's visible text: its text blocks, joined.
func (m *AssistantMessage) Text() string {
	if m == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range m.Content {
		if t, ok := c.(TextBlock); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// ToolCalls are the message's tool calls, in order.
func (m *AssistantMessage) ToolCalls() []ToolCall {
	if m == nil {
		return nil
	}
	var out []ToolCall
	for _, c := range m.Content {
		if t, ok := c.(ToolCall); ok {
			out = append(out, t)
		}
	}
	return out
}

// Block is one block of an assistant message: a TextBlock, ThinkingBlock,
// RedactedThinkingBlock or ToolCall.
type Block interface{ isBlock() }

// TextBlock is visible assistant text.
type TextBlock struct{ Text string }

// ThinkingBlock is the model's reasoning, with the provider's signature.
type ThinkingBlock struct{ Thinking, Signature string }

// RedactedThinkingBlock is reasoning the provider returned encrypted.
type RedactedThinkingBlock struct{ Data string }

// ToolCall is a request from the model to run a tool.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // the arguments, a JSON object
}

func (TextBlock) isBlock()             {}
func (ThinkingBlock) isBlock()         {}
func (RedactedThinkingBlock) isBlock() {}
func (ToolCall) isBlock()              {}

// StopDetails is the provider's typed reason for a stop. Known types are
// "refusal", "sensitive" and "stream_interrupted_after_content".
type StopDetails struct {
	Type   string
	Fields map[string]string // any further provider detail
}

// Usage is the token count of one turn, as the provider reported it.
type Usage struct {
	Input      int64 // input tokens not read from the cache
	Output     int64 // output tokens, reasoning included
	CacheRead  int64 // input tokens read from the prompt cache
	CacheWrite int64 // input tokens written to the prompt cache
}

// UserMessage is a prompt (or a steering message) from the user.
type UserMessage struct {
	Text string
	Time time.Time // when the session took it (zero: unknown)
}

// ToolResult is the output of one tool call.
type ToolResult struct {
	ToolCallID string
	Name       string
	Output     string
	IsError    bool
	Time       time.Time // when the tool finished (zero: unknown)
}

// ModelChange records that a session's model changed.
type ModelChange struct {
	From, To string // "provider/model"
	Role     string
	Reason   string // "fallback", "revert" or "user"
	// Pinned: the fallback stays until the user changes the model (a
	// refusal's fallback).
	Pinned bool
	// PrimaryCooldownUntil is when a fallback may revert to the primary
	// model (zero: unknown).
	PrimaryCooldownUntil time.Time
}

// Entry is one item of a conversation, in the context (what the
// next turn sends to the model) or in the persisted history. Exactly one
// of User, Assistant, ToolResult and ModelChange is set.
type Entry struct {
	Seq         uint64 // per-session history sequence number, from 1 (0: not yet stored)
	User        *UserMessage
	Assistant   *AssistantMessage
	ToolResult  *ToolResult
	ModelChange *ModelChange
}
