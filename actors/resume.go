package actors

import (
	"unique"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/session"
)

// InterruptedError is the error of the marker a resumed session appends
// after a prompt the process stopped in the middle of (a crash).
const InterruptedError = "interrupted: the session stopped before this prompt was answered"

// StopDetailInterrupted is the stop_details type of that marker.
const StopDetailInterrupted = "interrupted"

// resumed is a session's state rebuilt from its persisted history.
type resumed struct {
	context []*messages.Entry // the context
	seq     uint64            // of the last entry
	primary string            // the primary model: set by the user, else configured
	model   string            // the model in use when the history ends
	pinned  bool              // model is a pinned fallback
	// primaryCooldownUntilMs is when a fallback may revert to primary.
	primaryCooldownUntilMs int64
	// record is the record in backoff the session resumes its retry chain
	// from (nil: none; see recordToResume).
	record *session.Record
}

// resume rebuilds a session from entries. The context is the
// history without failed turns (stripped when retried) and model changes.
// The model in use is the last model change's (with its pinning), the
// primary the last one the user chose; a model whose provider is no
// longer known gives way to the configured one.
func resume(entries []*messages.Entry, configured string, known func(model string) bool) resumed {
	r := resumed{primary: configured, model: configured}
	for _, e := range entries {
		r.seq = max(r.seq, e.GetSeq())
		if mc := e.GetModelChange(); mc != nil {
			if mc.GetReason() == "user" {
				r.primary = mc.GetTo()
			}
			r.model, r.pinned, r.primaryCooldownUntilMs = mc.GetTo(), mc.GetPinned(), mc.GetPrimaryCooldownUntilMs()
			continue
		}
		if e.GetEntry() == nil {
			continue // a kind written by a newer version
		}
		if a := e.GetAssistant(); a != nil && isFailure(a) {
			continue
		}
		r.context = append(r.context, e)
	}
	if !known(r.primary) {
		r.primary = configured
	}
	if !known(r.model) {
		r.model, r.pinned = r.primary, false
	}
	r.primary, r.model = interned(r.primary), interned(r.model)
	return r
}

// interned is the runtime's one copy of a model selector: the sessions on
// a model share it, rather than each its own (from its options or its
// history), and reading it at each attempt (the provider's lookups) reads
// memory they all touch.
func interned(model string) string { return unique.Make(model).Value() }

// interruption returns the entries (without seq) that close a prompt the
// history shows in progress: error results for tool calls that never
// returned, then an aborted assistant message marked "interrupted". A
// history that ends with an answer or a failure needs none.
func interruption(entries []*messages.Entry, model string, nowMs int64) []*messages.Entry {
	var last *messages.Entry
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].GetModelChange() == nil && entries[i].GetEntry() != nil {
			last = entries[i]
			break
		}
	}
	var out []*messages.Entry
	switch {
	case last == nil:
		return nil
	case last.GetAssistant() != nil:
		a := last.GetAssistant()
		calls := toolCalls(a)
		if isFailure(a) || len(calls) == 0 {
			return nil
		}
		for _, c := range calls {
			out = append(out, &messages.Entry{Entry: &messages.Entry_ToolResult{ToolResult: &messages.ToolResult{
				ToolCallId: c.GetId(), Name: c.GetName(), Output: InterruptedError, IsError: true}}})
		}
	}
	return append(out, &messages.Entry{Entry: &messages.Entry_Assistant{Assistant: &messages.AssistantMessage{
		StopReason:   messages.StopReason_STOP_REASON_ABORTED,
		ErrorMessage: InterruptedError,
		StopDetails:  &messages.StopDetails{Type: StopDetailInterrupted},
		Provider:     providerOf(model),
		Model:        modelOf(model),
		TimestampMs:  nowMs,
	}}})
}
