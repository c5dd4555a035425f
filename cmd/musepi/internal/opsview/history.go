package opsview

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/musepi/musepi/messages"
)

// WriteHistory writes a session's entries as a table, one line each: seq,
// time, kind (user, assistant, tool, model, or unknown for an entry of a
// newer musepi) and what it holds, texts quoted with Go escapes so that an
// entry stays on its line.
func WriteHistory(w io.Writer, entries []*messages.Entry) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tCONTENT")
	for _, e := range entries {
		kind, at, content := describe(e)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", e.GetSeq(), stamp(at), kind, content)
	}
	return tw.Flush()
}

// describe is an entry's kind, time (zero: none) and content.
func describe(e *messages.Entry) (kind string, at time.Time, content string) {
	switch {
	case e.GetUser() != nil:
		u := e.GetUser()
		return "user", millis(u.GetTimestampMs()), fmt.Sprintf("%q", u.GetText())
	case e.GetAssistant() != nil:
		a := e.GetAssistant()
		return "assistant", millis(a.GetTimestampMs()), assistant(a)
	case e.GetToolResult() != nil:
		r := e.GetToolResult()
		status := ""
		if r.GetIsError() {
			status = " error"
		}
		return "tool", millis(r.GetTimestampMs()), fmt.Sprintf("%s (call %s)%s: %q", r.GetName(), r.GetToolCallId(), status, r.GetOutput())
	case e.GetModelChange() != nil:
		return "model", time.Time{}, modelChange(e.GetModelChange())
	}
	return "unknown", time.Time{}, "-"
}

// assistant describes an assistant message: "provider/model stop (HTTP
// status) [stop details]: its blocks, its error".
func assistant(a *messages.AssistantMessage) string {
	head := a.GetProvider() + "/" + a.GetModel() + " " + strings.ToLower(strings.TrimPrefix(a.GetStopReason().String(), "STOP_REASON_"))
	if a.GetHttpStatus() != 0 {
		head += fmt.Sprintf(" (HTTP %d)", a.GetHttpStatus())
	}
	if d := a.GetStopDetails().GetType(); d != "" {
		head += " [" + d + "]"
	}
	var parts []string
	for _, b := range a.GetContent() {
		switch {
		case b.GetText() != nil:
			parts = append(parts, fmt.Sprintf("%q", b.GetText().GetText()))
		case b.GetThinking() != nil:
			parts = append(parts, fmt.Sprintf("thinking (%d bytes)", len(b.GetThinking().GetThinking())))
		case b.GetRedactedThinking() != nil:
			parts = append(parts, "redacted thinking")
		case b.GetToolCall() != nil:
			c := b.GetToolCall()
			parts = append(parts, fmt.Sprintf("tool call %s %s %s", c.GetId(), c.GetName(), c.GetArgumentsJson()))
		}
	}
	if m := a.GetErrorMessage(); m != "" {
		parts = append(parts, fmt.Sprintf("error %q", m))
	}
	if len(parts) == 0 {
		return head
	}
	return head + ": " + strings.Join(parts, ", ")
}

// modelChange describes a model change: "from -> to (reason, role R,
// pinned)".
func modelChange(c *messages.ModelChange) string {
	notes := []string{orDash(c.GetReason())}
	if c.GetRole() != "" {
		notes = append(notes, "role "+c.GetRole())
	}
	if c.GetPinned() {
		notes = append(notes, "pinned")
	}
	return fmt.Sprintf("%s -> %s (%s)", orDash(c.GetFrom()), c.GetTo(), strings.Join(notes, ", "))
}

// millis is a Unix time in milliseconds, the zero time for 0.
func millis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
