package openai

import (
	"encoding/json"
	"fmt"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// itemKind is the kind of one conversation item sent to the model.
type itemKind uint8

const (
	itemUser itemKind = iota
	itemAssistant
	itemToolResult
)

// item is one runtime-context entry as the model sees it. from is the index
// of the entry it came from (for synthetic tool results, the entry they are
// placed before), so the Responses API can send only the items of new
// entries.
type item struct {
	kind   itemKind
	from   int
	text   string               // user or assistant text
	calls  []*messages.ToolCall // assistant tool calls
	callID string               // tool result
	output string               // tool result
}

// noResult is the output sent for a tool call that has no result in the
// context (the turn was aborted while tools ran), since the APIs reject an
// unanswered tool call.
const noResult = "No result provided"

// itemsOf maps the context to items: user messages, assistant
// messages (text and tool calls; thinking is left out) and tool results.
// ModelChange entries, assistant turns that failed or were aborted, and
// empty assistant turns are skipped. Every tool call gets exactly one
// result right after its assistant message; a result that answers no
// pending call is dropped.
func itemsOf(entries []*messages.Entry) []item {
	var out []item
	pending := pendingCalls{open: map[string]bool{}}
	for i, e := range entries {
		switch {
		case e.GetUser() != nil:
			out = append(out, pending.flush(i)...)
			out = append(out, item{kind: itemUser, from: i, text: e.GetUser().GetText()})
		case e.GetAssistant() != nil:
			it, ok := assistantItem(i, e.GetAssistant())
			if !ok {
				continue
			}
			out = append(out, pending.flush(i)...)
			out = append(out, it)
			pending.add(it.calls)
		case e.GetToolResult() != nil:
			r := e.GetToolResult()
			if !pending.answer(r.GetToolCallId()) {
				continue
			}
			out = append(out, item{kind: itemToolResult, from: i, callID: r.GetToolCallId(), output: r.GetOutput()})
		}
	}
	return append(out, pending.flush(len(entries))...)
}

// assistantItem is the item of assistant message a, entry i: its text and
// tool calls. It is false for a turn that failed or was aborted, and for
// one with neither text nor tool calls.
func assistantItem(i int, a *messages.AssistantMessage) (item, bool) {
	switch a.GetStopReason() {
	case messages.StopReason_STOP_REASON_ERROR, messages.StopReason_STOP_REASON_ABORTED:
		return item{}, false
	}
	var texts []string
	var calls []*messages.ToolCall
	for _, b := range a.GetContent() {
		if t := b.GetText().GetText(); t != "" {
			texts = append(texts, t)
		}
		if c := b.GetToolCall(); c != nil && c.GetId() != "" {
			calls = append(calls, c)
		}
	}
	if len(texts) == 0 && len(calls) == 0 {
		return item{}, false
	}
	return item{kind: itemAssistant, from: i, text: strings.Join(texts, "\n"), calls: calls}, true
}

// pendingCalls are the tool calls of the last assistant message, in call
// order, and whether each still awaits its result.
type pendingCalls struct {
	open  map[string]bool
	order []string
}

// add makes calls pending, each id once.
func (p *pendingCalls) add(calls []*messages.ToolCall) {
	for _, c := range calls {
		if !p.open[c.GetId()] {
			p.open[c.GetId()] = true
			p.order = append(p.order, c.GetId())
		}
	}
}

// answer reports whether call id awaits its result, which it then no
// longer does.
func (p *pendingCalls) answer(id string) bool {
	if !p.open[id] {
		return false
	}
	p.open[id] = false
	return true
}

// flush ends the pending calls: it returns a noResult item, placed before
// entry at, for each one still unanswered.
func (p *pendingCalls) flush(at int) []item {
	var out []item
	for _, id := range p.order {
		if p.open[id] {
			out = append(out, item{kind: itemToolResult, from: at, callID: id, output: noResult})
		}
	}
	clear(p.open)
	p.order = p.order[:0]
	return out
}

// arguments is a tool call's arguments as sent back to the API: the JSON
// object text, "{}" when empty.
func arguments(c *messages.ToolCall) string {
	if a := strings.TrimSpace(c.GetArgumentsJson()); a != "" {
		return a
	}
	return "{}"
}

// chatMessages maps items to Chat Completions messages.
func chatMessages(items []item) []oai.ChatCompletionMessageParamUnion {
	out := make([]oai.ChatCompletionMessageParamUnion, 0, len(items))
	for _, it := range items {
		switch it.kind {
		case itemUser:
			out = append(out, oai.UserMessage(it.text))
		case itemAssistant:
			var a oai.ChatCompletionAssistantMessageParam
			if it.text != "" {
				a.Content.OfString = oai.String(it.text)
			}
			for _, c := range it.calls {
				a.ToolCalls = append(a.ToolCalls, oai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.GetId(),
						Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.GetName(), Arguments: arguments(c)},
					},
				})
			}
			out = append(out, oai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case itemToolResult:
			out = append(out, oai.ToolMessage(it.output, it.callID))
		}
	}
	return out
}

// responseInput maps items to Responses API input items.
func responseInput(items []item) responses.ResponseInputParam {
	out := make(responses.ResponseInputParam, 0, len(items))
	for _, it := range items {
		switch it.kind {
		case itemUser:
			out = append(out, responses.ResponseInputItemParamOfMessage(it.text, responses.EasyInputMessageRoleUser))
		case itemAssistant:
			if it.text != "" {
				out = append(out, responses.ResponseInputItemParamOfMessage(it.text, responses.EasyInputMessageRoleAssistant))
			}
			for _, c := range it.calls {
				out = append(out, responses.ResponseInputItemParamOfFunctionCall(arguments(c), c.GetId(), c.GetName()))
			}
		case itemToolResult:
			r := responses.ResponseInputItemParamOfFunctionCallOutput(it.output)
			r.OfFunctionCallOutput.CallID = oai.String(it.callID)
			out = append(out, r)
		}
	}
	return out
}

// schemaOf parses a tool's JSON schema; an empty schema is {"type":"object"}.
func schemaOf(t provider.ToolSpec) (map[string]any, error) {
	if strings.TrimSpace(t.SchemaJSON) == "" {
		return map[string]any{"type": "object"}, nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(t.SchemaJSON), &m); err != nil || m == nil {
		if err == nil {
			err = fmt.Errorf("not a JSON object")
		}
		return nil, fmt.Errorf("tool %q: invalid parameters schema: %w", t.Name, err)
	}
	return m, nil
}

// chatTools maps tool specs to Chat Completions function tools.
func chatTools(specs []provider.ToolSpec) ([]oai.ChatCompletionToolUnionParam, error) {
	var out []oai.ChatCompletionToolUnionParam
	for _, t := range specs {
		schema, err := schemaOf(t)
		if err != nil {
			return nil, err
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: schema}
		if t.Description != "" {
			fn.Description = oai.String(t.Description)
		}
		out = append(out, oai.ChatCompletionFunctionTool(fn))
	}
	return out, nil
}

// responseTools maps tool specs to Responses API function tools (not
// strict: strict mode needs schemas written for it).
func responseTools(specs []provider.ToolSpec) ([]responses.ToolUnionParam, error) {
	var out []responses.ToolUnionParam
	for _, t := range specs {
		schema, err := schemaOf(t)
		if err != nil {
			return nil, err
		}
		tool := responses.ToolParamOfFunction(t.Name, schema, false)
		if t.Description != "" {
			tool.OfFunction.Description = oai.String(t.Description)
		}
		out = append(out, tool)
	}
	return out, nil
}
