package anthropic

import (
	"encoding/json"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// blockKind is the kind of a content block being streamed.
type blockKind uint8

const (
	kindText blockKind = iota + 1
	kindThinking
	kindRedacted
	kindTool
)

// block is one content block as it streams in.
type block struct {
	kind      blockKind
	text      strings.Builder // text, thinking, or a tool call's arguments JSON
	signature string          // thinking signature
	data      string          // redacted thinking data
	id, name  string          // tool call
	input     string          // a tool call's input as given by content_block_start
}

// accumulator turns stream events into deltas and content. It tolerates odd
// event orders: deltas for unknown indexes and unknown block or delta types
// are ignored, and nothing in it can panic on server data.
type accumulator struct {
	onDelta func(provider.Delta)
	blocks  []*block         // in start order
	byIndex map[int64]*block // the API's block index to the block

	started    bool // message_start seen
	stopped    bool // message_stop seen
	stopReason sdk.StopReason
	refusal    sdk.RefusalStopDetails
	usage      *messages.Usage // input counts from message_start, output from message_delta
	model      string          // the model message_start named
}

func newAccumulator(onDelta func(provider.Delta)) *accumulator {
	return &accumulator{onDelta: onDelta, byIndex: map[int64]*block{}}
}

// handle applies one stream event.
func (a *accumulator) handle(ev sdk.MessageStreamEventUnion) {
	switch ev.Type {
	case "message_start":
		a.started = true
		a.model = string(ev.Message.Model)
		u := ev.Message.Usage
		a.usage = &messages.Usage{Input: u.InputTokens, CacheRead: u.CacheReadInputTokens,
			CacheWrite: u.CacheCreationInputTokens, Output: u.OutputTokens}
	case "content_block_start":
		a.started = true
		a.start(ev.Index, ev.ContentBlock)
	case "content_block_delta":
		a.delta(ev.Index, ev.Delta)
	case "content_block_stop":
		// Blocks are finished when the content is built.
	case "message_delta":
		if ev.Delta.StopReason != "" {
			a.stopReason = ev.Delta.StopReason
		}
		if ev.Delta.JSON.StopDetails.Valid() {
			a.refusal = ev.Delta.StopDetails
		}
		if a.usage != nil && ev.Usage.OutputTokens > 0 {
			a.usage.Output = ev.Usage.OutputTokens
		}
	case "message_stop":
		a.stopped = true
	}
}

func (a *accumulator) start(index int64, cb sdk.ContentBlockStartEventContentBlockUnion) {
	b := &block{}
	switch cb.Type {
	case "text":
		b.kind = kindText
		if cb.Text != "" {
			b.text.WriteString(cb.Text)
			a.onDelta(provider.Delta{Kind: "text", Text: cb.Text})
		}
	case "thinking":
		b.kind = kindThinking
		b.signature = cb.Signature
		if cb.Thinking != "" {
			b.text.WriteString(cb.Thinking)
			a.onDelta(provider.Delta{Kind: "thinking", Text: cb.Thinking})
		}
	case "redacted_thinking":
		b.kind = kindRedacted
		b.data = cb.Data
	case "tool_use":
		b.kind = kindTool
		b.id, b.name = cb.ID, cb.Name
		b.input = strings.TrimSpace(cb.JSON.Input.Raw())
	default:
		// Server tools, citations results and other block types are not
		// modelled by MusePi; their deltas are dropped with them.
		delete(a.byIndex, index)
		return
	}
	a.blocks = append(a.blocks, b)
	a.byIndex[index] = b
}

func (a *accumulator) delta(index int64, d sdk.MessageStreamEventUnionDelta) {
	b := a.byIndex[index]
	if b == nil {
		return
	}
	switch d.Type {
	case "text_delta":
		if b.kind == kindText && d.Text != "" {
			b.text.WriteString(d.Text)
			a.onDelta(provider.Delta{Kind: "text", Text: d.Text})
		}
	case "thinking_delta":
		if b.kind == kindThinking && d.Thinking != "" {
			b.text.WriteString(d.Thinking)
			a.onDelta(provider.Delta{Kind: "thinking", Text: d.Thinking})
		}
	case "signature_delta":
		if b.kind == kindThinking {
			b.signature += d.Signature
		}
	case "input_json_delta":
		if b.kind == kindTool && d.PartialJSON != "" {
			b.text.WriteString(d.PartialJSON)
			a.onDelta(provider.Delta{Kind: "tool_call", Text: d.PartialJSON})
		}
	}
}

// done reports whether the message is over (message_stop seen).
func (a *accumulator) done() bool { return a.stopped }

// complete reports whether the stream delivered a whole message: a
// message_stop, or at least the final message_delta with its stop reason
// (the connection may drop between the two).
func (a *accumulator) complete() bool {
	return a.started && (a.stopped || a.stopReason != "")
}

// content is the content streamed so far. Empty text and thinking blocks are
// left out, so that content holds observable output only when some was
// actually streamed.
func (a *accumulator) content() []*messages.ContentBlock {
	var out []*messages.ContentBlock
	for _, b := range a.blocks {
		switch b.kind {
		case kindText:
			if b.text.Len() > 0 {
				out = append(out, &messages.ContentBlock{Block: &messages.ContentBlock_Text{
					Text: &messages.TextBlock{Text: b.text.String()}}})
			}
		case kindThinking:
			if b.text.Len() > 0 || b.signature != "" {
				out = append(out, &messages.ContentBlock{Block: &messages.ContentBlock_Thinking{
					Thinking: &messages.ThinkingBlock{Thinking: b.text.String(), Signature: b.signature}}})
			}
		case kindRedacted:
			out = append(out, &messages.ContentBlock{Block: &messages.ContentBlock_RedactedThinking{
				RedactedThinking: &messages.RedactedThinkingBlock{Data: b.data}}})
		case kindTool:
			out = append(out, &messages.ContentBlock{Block: &messages.ContentBlock_ToolCall{
				ToolCall: &messages.ToolCall{Id: b.id, Name: b.name, ArgumentsJson: b.arguments()}}})
		}
	}
	return out
}

// arguments is the tool call's input JSON: the streamed input_json_delta
// pieces, else the input of content_block_start, else "{}".
func (b *block) arguments() string {
	if s := strings.TrimSpace(b.text.String()); s != "" {
		return s
	}
	if b.input != "" && b.input != "null" {
		return b.input
	}
	return "{}"
}

// result is the final message of a complete stream.
func (a *accumulator) result() *messages.AssistantMessage {
	m := &messages.AssistantMessage{Content: a.content(), HttpStatus: 200, Usage: a.usage, ResponseModel: a.model}
	switch a.stopReason {
	case sdk.StopReasonToolUse:
		m.StopReason = messages.StopReason_STOP_REASON_TOOL_USE
	case sdk.StopReasonMaxTokens, sdk.StopReasonModelContextWindowExceeded:
		m.StopReason = messages.StopReason_STOP_REASON_LENGTH
	case sdk.StopReasonRefusal:
		m.StopReason = messages.StopReason_STOP_REASON_ERROR
		m.StopDetails = &messages.StopDetails{Type: stopDetailRefusal}
		category, explanation := string(a.refusal.Category), strings.TrimSpace(a.refusal.Explanation)
		if category != "" || explanation != "" {
			m.StopDetails.Fields = map[string]string{}
			if category != "" {
				m.StopDetails.Fields["category"] = category
			}
			if explanation != "" {
				m.StopDetails.Fields["explanation"] = explanation
			}
		}
		// The Messages API sends no error text with a refusal: its words
		// are the explanation.
		m.ErrorMessage = provider.RefusalMessage("", explanation, refusalText(category))
	default:
		// end_turn, stop_sequence, pause_turn and reasons this SDK does not
		// know end the turn normally.
		m.StopReason = messages.StopReason_STOP_REASON_STOP
	}
	return m
}

// refusalText is the error message of a refusal without an explanation.
func refusalText(category string) string {
	text := "the model refused to continue (stop_reason refusal"
	if category != "" {
		text += ", category " + category
	}
	return text + ")"
}

// validJSONObject reports whether s is a JSON object.
func validJSONObject(s string) bool {
	s = strings.TrimSpace(s)
	return strings.HasPrefix(s, "{") && json.Valid([]byte(s))
}
