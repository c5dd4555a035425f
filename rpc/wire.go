package rpc

import (
	"encoding/json"

	"github.com/musepi/musepi/messages"
)

// This file renders conversation entries in the shapes of pi's message
// types (Message of @mariozechner/pi-ai 0.73): UserMessage, AssistantMessage
// and ToolResultMessage, their content blocks and stop reasons. MusePi's own
// details (HTTP status, headers, stop details) are extra fields.

// stopReasons are pi's spellings of the stop reasons.
var stopReasons = map[messages.StopReason]string{
	messages.StopReason_STOP_REASON_STOP:     "stop",
	messages.StopReason_STOP_REASON_TOOL_USE: "toolUse",
	messages.StopReason_STOP_REASON_LENGTH:   "length",
	messages.StopReason_STOP_REASON_ERROR:    "error",
	messages.StopReason_STOP_REASON_ABORTED:  "aborted",
}

// stopReason is pi's word for r; an unspecified reason (a message still
// streaming) reads "stop".
func stopReason(r messages.StopReason) string {
	if w, ok := stopReasons[r]; ok {
		return w
	}
	return "stop"
}

// userJSON is pi's UserMessage.
func userJSON(u *messages.UserMessage) map[string]any {
	return map[string]any{"role": "user", "content": u.GetText(), "timestamp": u.GetTimestampMs()}
}

// toolResultJSON is pi's ToolResultMessage.
func toolResultJSON(r *messages.ToolResult) map[string]any {
	return map[string]any{
		"role":       "toolResult",
		"toolCallId": r.GetToolCallId(),
		"toolName":   r.GetName(),
		"content":    []any{map[string]any{"type": "text", "text": r.GetOutput()}},
		"isError":    r.GetIsError(),
		"timestamp":  r.GetTimestampMs(),
	}
}

// assistantJSON is pi's AssistantMessage; model describes the model that
// produced it (its API and price).
func assistantJSON(m *messages.AssistantMessage, model Model) map[string]any {
	content := make([]any, 0, len(m.GetContent()))
	for _, b := range m.GetContent() {
		content = append(content, contentBlock(b))
	}
	out := map[string]any{
		"role":       "assistant",
		"content":    content,
		"api":        model.API,
		"provider":   m.GetProvider(),
		"model":      m.GetModel(),
		"usage":      usageJSON(m.GetUsage(), model.Cost),
		"stopReason": stopReason(m.GetStopReason()),
		"timestamp":  m.GetTimestampMs(),
	}
	if e := m.GetErrorMessage(); e != "" {
		out["errorMessage"] = e
	}
	if d := m.GetStopDetails(); d != nil {
		out["stopDetails"] = toJSON(d)
	}
	if st := m.GetHttpStatus(); st != 0 {
		out["httpStatus"] = st
	}
	if h := m.GetHeaders(); len(h) > 0 {
		out["headers"] = h
	}
	return out
}

// usageJSON is pi's Usage: the provider's token counts, and their cost in
// dollars at the model's configured price (zero without one).
func usageJSON(u *messages.Usage, price Cost) map[string]any {
	cost := map[string]float64{
		"input":      float64(u.GetInput()) * price.Input / 1e6,
		"output":     float64(u.GetOutput()) * price.Output / 1e6,
		"cacheRead":  float64(u.GetCacheRead()) * price.CacheRead / 1e6,
		"cacheWrite": float64(u.GetCacheWrite()) * price.CacheWrite / 1e6,
	}
	cost["total"] = cost["input"] + cost["output"] + cost["cacheRead"] + cost["cacheWrite"]
	return map[string]any{
		"input":       u.GetInput(),
		"output":      u.GetOutput(),
		"cacheRead":   u.GetCacheRead(),
		"cacheWrite":  u.GetCacheWrite(),
		"totalTokens": u.GetInput() + u.GetOutput() + u.GetCacheRead() + u.GetCacheWrite(),
		"cost":        cost,
	}
}

// contentBlock is one of pi's content blocks: text, thinking (redacted
// thinking is a thinking block with redacted: true and the provider's data
// as its signature, as pi-ai stores it) or toolCall with its arguments as
// an object.
func contentBlock(b *messages.ContentBlock) map[string]any {
	switch {
	case b.GetText() != nil:
		return map[string]any{"type": "text", "text": b.GetText().GetText()}
	case b.GetThinking() != nil:
		out := map[string]any{"type": "thinking", "thinking": b.GetThinking().GetThinking()}
		if sig := b.GetThinking().GetSignature(); sig != "" {
			out["thinkingSignature"] = sig
		}
		return out
	case b.GetRedactedThinking() != nil:
		return map[string]any{"type": "thinking", "thinking": "[Reasoning redacted]",
			"thinkingSignature": b.GetRedactedThinking().GetData(), "redacted": true}
	case b.GetToolCall() != nil:
		c := b.GetToolCall()
		return map[string]any{"type": "toolCall", "id": c.GetId(), "name": c.GetName(), "arguments": arguments(c.GetArgumentsJson())}
	}
	return map[string]any{"type": "text", "text": ""}
}

// arguments decodes a tool call's arguments; arguments that are not a JSON
// object (a stream cut short) are an empty object, as pi-ai's partial-JSON
// parser leaves them.
func arguments(s string) map[string]any {
	var args map[string]any
	if err := json.Unmarshal([]byte(s), &args); err != nil || args == nil {
		return map[string]any{}
	}
	return args
}

// entryJSON renders a runtime-context entry as pi's Message; entries pi has
// no message for (model changes) render as nil.
func (s *Server) entryJSON(e *messages.Entry) map[string]any {
	switch {
	case e.GetUser() != nil:
		return userJSON(e.GetUser())
	case e.GetAssistant() != nil:
		a := e.GetAssistant()
		return assistantJSON(a, s.model(a.GetProvider(), a.GetModel()))
	case e.GetToolResult() != nil:
		return toolResultJSON(e.GetToolResult())
	}
	return nil
}
