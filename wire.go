package musepi

import (
	"maps"
	"time"

	"github.com/musepi/musepi/messages"
)

// This file converts between the Go types of the API and the protobuf wire
// format of the actors (package messages), at the boundary.

var stopReasons = map[messages.StopReason]StopReason{
	messages.StopReason_STOP_REASON_UNSPECIFIED: "",
	messages.StopReason_STOP_REASON_STOP:        StopReasonStop,
	messages.StopReason_STOP_REASON_TOOL_USE:    StopReasonToolUse,
	messages.StopReason_STOP_REASON_LENGTH:      StopReasonLength,
	messages.StopReason_STOP_REASON_ERROR:       StopReasonError,
	messages.StopReason_STOP_REASON_ABORTED:     StopReasonAborted,
}

// wireStopReasons is stopReasons inverted.
var wireStopReasons = func() map[StopReason]messages.StopReason {
	m := make(map[StopReason]messages.StopReason, len(stopReasons))
	for w, r := range stopReasons {
		m[r] = w
	}
	return m
}()

// timeFromMs is a Unix-millisecond time; 0 is the zero time.
func timeFromMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// msFromTime is timeFromMs inverted.
func msFromTime(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

func fromWireAssistant(m *messages.AssistantMessage) *AssistantMessage {
	if m == nil {
		return nil
	}
	out := &AssistantMessage{
		StopReason:    stopReasons[m.GetStopReason()],
		ErrorMessage:  m.GetErrorMessage(),
		HTTPStatus:    int(m.GetHttpStatus()),
		Headers:       maps.Clone(m.GetHeaders()), // the actors keep theirs
		Provider:      m.GetProvider(),
		Model:         m.GetModel(),
		ResponseModel: m.GetResponseModel(),
		Time:          timeFromMs(m.GetTimestampMs()),
	}
	for _, b := range m.GetContent() {
		switch b := b.GetBlock().(type) {
		case *messages.ContentBlock_Text:
			out.Content = append(out.Content, TextBlock{Text: b.Text.GetText()})
		case *messages.ContentBlock_Thinking:
			out.Content = append(out.Content, ThinkingBlock{Thinking: b.Thinking.GetThinking(), Signature: b.Thinking.GetSignature()})
		case *messages.ContentBlock_RedactedThinking:
			out.Content = append(out.Content, RedactedThinkingBlock{Data: b.RedactedThinking.GetData()})
		case *messages.ContentBlock_ToolCall:
			out.Content = append(out.Content, fromWireToolCall(b.ToolCall))
		}
	}
	if d := m.GetStopDetails(); d != nil {
		out.StopDetails = &StopDetails{Type: d.GetType(), Fields: maps.Clone(d.GetFields())}
	}
	if u := m.GetUsage(); u != nil {
		out.Usage = &Usage{Input: u.GetInput(), Output: u.GetOutput(), CacheRead: u.GetCacheRead(), CacheWrite: u.GetCacheWrite()}
	}
	return out
}

func toWireAssistant(m *AssistantMessage) *messages.AssistantMessage {
	if m == nil {
		return nil
	}
	out := &messages.AssistantMessage{
		StopReason:    wireStopReasons[m.StopReason],
		ErrorMessage:  m.ErrorMessage,
		HttpStatus:    int32(m.HTTPStatus),
		Headers:       maps.Clone(m.Headers),
		Provider:      m.Provider,
		Model:         m.Model,
		ResponseModel: m.ResponseModel,
		TimestampMs:   msFromTime(m.Time),
	}
	for _, b := range m.Content {
		var wb messages.ContentBlock
		switch b := b.(type) {
		case TextBlock:
			wb.Block = &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: b.Text}}
		case ThinkingBlock:
			wb.Block = &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{Thinking: b.Thinking, Signature: b.Signature}}
		case RedactedThinkingBlock:
			wb.Block = &messages.ContentBlock_RedactedThinking{RedactedThinking: &messages.RedactedThinkingBlock{Data: b.Data}}
		case ToolCall:
			wb.Block = &messages.ContentBlock_ToolCall{ToolCall: toWireToolCall(b)}
		default:
			continue // a nil block
		}
		out.Content = append(out.Content, &wb)
	}
	if d := m.StopDetails; d != nil {
		out.StopDetails = &messages.StopDetails{Type: d.Type, Fields: maps.Clone(d.Fields)}
	}
	if u := m.Usage; u != nil {
		out.Usage = &messages.Usage{Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite}
	}
	return out
}

func fromWireToolCall(c *messages.ToolCall) ToolCall {
	return ToolCall{ID: c.GetId(), Name: c.GetName(), Arguments: c.GetArgumentsJson()}
}

func toWireToolCall(c ToolCall) *messages.ToolCall {
	return &messages.ToolCall{Id: c.ID, Name: c.Name, ArgumentsJson: c.Arguments}
}

func fromWireUser(u *messages.UserMessage) UserMessage {
	return UserMessage{Text: u.GetText(), Time: timeFromMs(u.GetTimestampMs())}
}

func fromWireToolResult(r *messages.ToolResult) ToolResult {
	return ToolResult{ToolCallID: r.GetToolCallId(), Name: r.GetName(), Output: r.GetOutput(), IsError: r.GetIsError(), Time: timeFromMs(r.GetTimestampMs())}
}

func fromWireModelChange(c *messages.ModelChange) ModelChange {
	return ModelChange{From: c.GetFrom(), To: c.GetTo(), Role: c.GetRole(), Reason: c.GetReason(), Pinned: c.GetPinned(),
		PrimaryCooldownUntil: timeFromMs(c.GetPrimaryCooldownUntilMs())}
}

// ptrIf is &f(w), or nil when w is nil.
func ptrIf[W comparable, T any](w W, f func(W) T) *T {
	var zero W
	if w == zero {
		return nil
	}
	v := f(w)
	return &v
}

func fromWireEntries(entries []*messages.Entry) []Entry {
	out := make([]Entry, len(entries))
	for i, e := range entries {
		out[i] = Entry{
			Seq:         e.GetSeq(),
			User:        ptrIf(e.GetUser(), fromWireUser),
			Assistant:   fromWireAssistant(e.GetAssistant()),
			ToolResult:  ptrIf(e.GetToolResult(), fromWireToolResult),
			ModelChange: ptrIf(e.GetModelChange(), fromWireModelChange),
		}
	}
	return out
}

// Wire is the entry in the protobuf wire format of the actors and the RPC
// (package messages). An entry with none of its parts set gives an Entry
// with none either; with several, the first of User, Assistant,
// ToolResult, ModelChange.
func (e Entry) Wire() *messages.Entry {
	out := &messages.Entry{Seq: e.Seq}
	switch {
	case e.User != nil:
		out.Entry = &messages.Entry_User{User: &messages.UserMessage{Text: e.User.Text, TimestampMs: msFromTime(e.User.Time)}}
	case e.Assistant != nil:
		out.Entry = &messages.Entry_Assistant{Assistant: toWireAssistant(e.Assistant)}
	case e.ToolResult != nil:
		r := e.ToolResult
		out.Entry = &messages.Entry_ToolResult{ToolResult: &messages.ToolResult{ToolCallId: r.ToolCallID, Name: r.Name, Output: r.Output,
			IsError: r.IsError, TimestampMs: msFromTime(r.Time)}}
	case e.ModelChange != nil:
		c := e.ModelChange
		out.Entry = &messages.Entry_ModelChange{ModelChange: &messages.ModelChange{From: c.From, To: c.To, Role: c.Role, Reason: c.Reason,
			Pinned: c.Pinned, PrimaryCooldownUntilMs: msFromTime(c.PrimaryCooldownUntil)}}
	}
	return out
}

func toWireEntries(entries []Entry) []*messages.Entry {
	out := make([]*messages.Entry, len(entries))
	for i, e := range entries {
		out[i] = e.Wire()
	}
	return out
}
