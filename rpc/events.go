package rpc

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/messages"
)

// event is one session event in the wire format (the RPC writes the wire
// protocol's JSON), its oneof payload unpacked.
type event struct {
	SessionID string
	Time      time.Time
	Type      string        // the oneof field's name: "auto_retry_start", ...
	Payload   proto.Message // *messages.AutoRetryStart, ...
}

// wireEvent unpacks ev.
func wireEvent(ev *messages.SessionEvent) event {
	e := event{SessionID: ev.GetSessionId(), Time: time.UnixMilli(ev.GetTimeMs())}
	r := ev.ProtoReflect()
	if fd := r.WhichOneof(r.Descriptor().Oneofs().ByName("event")); fd != nil {
		e.Type = string(fd.Name())
		e.Payload = r.Get(fd).Message().Interface()
	}
	return e
}

// translator turns one session's events into pi's AgentEvent sequence:
//
//	agent_start, turn_start, message_start/message_end (user),
//	message_start, message_update…, message_end (assistant),
//	tool_execution_start/end and message_start/end (toolResult)…,
//	turn_end, [turn_start …], agent_end {messages}
//
// MusePi's own events (auto_retry_start, agent_settled, credential_switch,
// …) pass through with their fields. It runs on the session's subscriber
// goroutine only.
type translator struct {
	s *Server

	turnOpen bool
	// partial is the assistant message being streamed (nil: none started).
	partial  *messages.AssistantMessage
	lastKind string
	turnMsg  map[string]any // the turn's assistant message, once ended
	results  []any          // the turn's tool results
	run      []any          // the messages of the agent run
}

// event handles one session event, writing its lines.
func (t *translator) event(ev event) {
	switch p := ev.Payload.(type) {
	case *messages.AgentStart:
		t.agentStart(ev, p)
	case *messages.SteeringDelivered:
		t.closeTurn(ev) // the turn whose tools ran
		t.openTurn(ev)
		t.message(ev, userJSON(p.GetUser()))
	case *messages.MessageUpdate:
		t.update(ev, p)
	case *messages.MessageEnd:
		t.assistantEnd(ev, p.GetMessage())
	case *messages.ToolExecutionStart:
		t.toolStart(ev, p.GetCall())
	case *messages.ToolExecutionEnd:
		t.toolEnd(ev, p.GetResult())
	case *messages.AgentEnd:
		t.agentEnd(ev, p)
	case *messages.AutoRetryStart:
		t.s.retryWaiting(p.GetAttempt(), ev.Time.Add(time.Duration(p.GetDelayMs())*time.Millisecond))
		t.passThrough(ev)
	case *messages.AutoRetryEnd, *messages.AgentSettled:
		t.s.retryWaitOver()
		t.passThrough(ev)
	default:
		t.passThrough(ev)
	}
}

// baseLine is the start of a line of type typ about ev's session.
func baseLine(ev event, typ string) map[string]any {
	return map[string]any{"type": typ, "sessionId": ev.SessionID}
}

// agentStart writes agent_start, starting a new run, and opens the first
// turn with the user's message when the run has one.
func (t *translator) agentStart(ev event, p *messages.AgentStart) {
	t.s.lastRunEnded(false)
	t.run = nil
	t.s.retryWaitOver()
	start := baseLine(ev, "agent_start")
	start["generation"] = p.GetGeneration()
	t.s.writeLine(start)
	if p.GetUser() != nil {
		t.openTurn(ev)
		t.message(ev, userJSON(p.GetUser()))
	}
}

// toolStart writes tool_execution_start of call c.
func (t *translator) toolStart(ev event, c *messages.ToolCall) {
	line := baseLine(ev, "tool_execution_start")
	line["toolCallId"], line["toolName"], line["args"] = c.GetId(), c.GetName(), arguments(c.GetArgumentsJson())
	t.s.writeLine(line)
}

// toolEnd writes tool_execution_end of result r, then r as a toolResult
// message, which the turn's tool results keep.
func (t *translator) toolEnd(ev event, r *messages.ToolResult) {
	line := baseLine(ev, "tool_execution_end")
	line["toolCallId"], line["toolName"], line["isError"] = r.GetToolCallId(), r.GetName(), r.GetIsError()
	line["result"] = map[string]any{"content": []any{map[string]any{"type": "text", "text": r.GetOutput()}}, "details": map[string]any{}}
	t.s.writeLine(line)
	msg := toolResultJSON(r)
	t.message(ev, msg)
	t.results = append(t.results, msg)
}

// agentEnd closes the open turn and writes agent_end with the run's
// messages.
func (t *translator) agentEnd(ev event, p *messages.AgentEnd) {
	t.closeTurn(ev)
	end := baseLine(ev, "agent_end")
	end["messages"] = append([]any{}, t.run...)
	end["willRetry"] = p.GetWillRetry()
	t.run = nil
	if !p.GetWillRetry() {
		t.s.lastRunEnded(true) // before the line: a client may answer it at once
	}
	t.s.writeLine(end)
}

// passThrough writes one of MusePi's own events: its fields, "type" and
// "sessionId".
func (t *translator) passThrough(ev event) {
	obj := toJSON(ev.Payload)
	if obj == nil {
		obj = map[string]any{}
	}
	obj["type"] = ev.Type
	obj["sessionId"] = ev.SessionID
	t.s.writeLine(obj)
}

func (t *translator) openTurn(ev event) {
	if t.turnOpen {
		return
	}
	t.turnOpen = true
	t.turnMsg, t.results = nil, nil
	t.s.writeLine(map[string]any{"type": "turn_start", "sessionId": ev.SessionID})
}

// closeTurn writes turn_end for an open turn.
func (t *translator) closeTurn(ev event) {
	if !t.turnOpen {
		return
	}
	t.turnOpen = false
	msg := t.turnMsg
	if msg == nil {
		msg = t.partialJSON() // the turn ended before its message did
	}
	results := t.results
	if results == nil {
		results = []any{}
	}
	t.s.writeLine(map[string]any{"type": "turn_end", "sessionId": ev.SessionID, "message": msg, "toolResults": results})
	t.turnMsg, t.results = nil, nil
}

// message writes message_start and message_end of a complete message and
// adds it to the run's messages.
func (t *translator) message(ev event, msg map[string]any) {
	t.s.writeLine(map[string]any{"type": "message_start", "sessionId": ev.SessionID, "message": msg})
	t.s.writeLine(map[string]any{"type": "message_end", "sessionId": ev.SessionID, "message": msg})
	t.run = append(t.run, msg)
}

// deltaTypes are pi's assistantMessageEvent types of each delta kind.
var deltaTypes = map[string]string{"text": "text_delta", "thinking": "thinking_delta", "tool_call": "toolcall_delta"}

// update writes message_update for one streamed delta, opening the turn
// and the message first when it is the first. A delta of another kind, or
// an empty tool_call delta (a new call opening), starts a new content
// block.
func (t *translator) update(ev event, p *messages.MessageUpdate) {
	if t.turnMsg != nil {
		t.closeTurn(ev) // the previous turn's tools ran: this is the next turn
	}
	t.openTurn(ev)
	if t.partial == nil {
		m := t.s.modelOf(t.s.current().Model())
		t.partial = &messages.AssistantMessage{Provider: m.Provider, Model: m.ID}
		t.lastKind = ""
		t.s.writeLine(map[string]any{"type": "message_start", "sessionId": ev.SessionID, "message": t.partialJSON()})
	}
	kind, delta := p.GetKind(), p.GetDelta()
	evType, ok := deltaTypes[kind]
	if !ok {
		return // a kind pi has no event for
	}
	if kind != t.lastKind || (kind == "tool_call" && delta == "") {
		t.blockEnd(ev)
		t.partial.Content = append(t.partial.Content, emptyBlock(kind))
		t.lastKind = kind
		t.blockEvent(ev, map[string]any{"type": blockEventTypes[kind] + "_start"})
	}
	idx := len(t.partial.Content) - 1
	appendDelta(t.partial.Content[idx], delta)
	partial := t.partialJSON()
	t.s.writeLine(map[string]any{
		"type": "message_update", "sessionId": ev.SessionID, "message": partial,
		"assistantMessageEvent": map[string]any{"type": evType, "contentIndex": idx, "delta": delta, "partial": partial},
	})
}

// blockEventTypes are the prefixes of pi's *_start and *_end events of
// each delta kind.
var blockEventTypes = map[string]string{"text": "text", "thinking": "thinking", "tool_call": "toolcall"}

// blockEnd writes the *_end message_update of the content block that
// streams, if any: its whole content (a tool call as pi's toolCall).
func (t *translator) blockEnd(ev event) {
	if t.partial == nil || len(t.partial.Content) == 0 {
		return
	}
	b := t.partial.Content[len(t.partial.Content)-1]
	e := map[string]any{"type": blockEventTypes[t.lastKind] + "_end"}
	switch {
	case b.GetText() != nil:
		e["content"] = b.GetText().GetText()
	case b.GetThinking() != nil:
		e["content"] = b.GetThinking().GetThinking()
	case b.GetToolCall() != nil:
		content, _ := t.partialJSON()["content"].([]any)
		e["toolCall"] = content[len(content)-1]
	}
	t.blockEvent(ev, e)
}

// blockEvent writes a message_update for an event of the last content
// block (its contentIndex and the partial message are added).
func (t *translator) blockEvent(ev event, e map[string]any) {
	partial := t.partialJSON()
	e["contentIndex"], e["partial"] = len(t.partial.Content)-1, partial
	t.s.writeLine(map[string]any{"type": "message_update", "sessionId": ev.SessionID, "message": partial, "assistantMessageEvent": e})
}

func (t *translator) partialJSON() map[string]any {
	m := t.partial
	if m == nil {
		m = &messages.AssistantMessage{}
	}
	return assistantJSON(m, t.s.model(m.GetProvider(), m.GetModel()))
}

// assistantEnd writes message_end of the turn's assistant message (and its
// message_start when nothing streamed), and turn_end unless tools run next.
func (t *translator) assistantEnd(ev event, m *messages.AssistantMessage) {
	if t.turnMsg != nil {
		t.closeTurn(ev)
	}
	t.openTurn(ev)
	msg := assistantJSON(m, t.s.model(m.GetProvider(), m.GetModel()))
	if t.partial == nil {
		t.s.writeLine(map[string]any{"type": "message_start", "sessionId": ev.SessionID, "message": msg})
	}
	t.blockEnd(ev)
	t.partial = nil
	t.s.writeLine(map[string]any{"type": "message_end", "sessionId": ev.SessionID, "message": msg})
	t.run = append(t.run, msg)
	t.turnMsg = msg
	if m.GetStopReason() != messages.StopReason_STOP_REASON_TOOL_USE && len(toolCallsOf(m)) == 0 {
		t.closeTurn(ev)
	}
}

func emptyBlock(kind string) *messages.ContentBlock {
	switch kind {
	case "thinking":
		return &messages.ContentBlock{Block: &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{}}}
	case "tool_call":
		return &messages.ContentBlock{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{}}}
	}
	return &messages.ContentBlock{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{}}}
}

func appendDelta(b *messages.ContentBlock, delta string) {
	switch {
	case b.GetText() != nil:
		b.GetText().Text += delta
	case b.GetThinking() != nil:
		b.GetThinking().Thinking += delta
	case b.GetToolCall() != nil:
		b.GetToolCall().ArgumentsJson += delta
	}
}
