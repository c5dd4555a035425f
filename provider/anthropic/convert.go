package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// missingToolResult is the tool_result sent for a tool call that has no
// result in the context (the API rejects a tool_use without one).
const missingToolResult = "No result: the tool call was not executed."

// buildParams maps a request to the Messages API parameters.
func (p *Provider) buildParams(req provider.Request) (sdk.MessageNewParams, error) {
	params := sdk.MessageNewParams{
		Model:     sdk.Model(req.Model),
		MaxTokens: p.cfg.MaxTokens,
		Messages:  convertContext(req.Context),
	}
	if budget := thinkingBudget(p.cfg, req.Thinking); budget > 0 {
		params.Thinking = sdk.ThinkingConfigParamOfEnabled(budget)
		if params.MaxTokens <= budget {
			params.MaxTokens = budget + p.cfg.MaxTokens // the API wants room for the answer
		}
	}
	for _, t := range req.Tools {
		schema, err := inputSchema(t.SchemaJSON)
		if err != nil {
			return params, fmt.Errorf("anthropic: tool %q: %w", t.Name, err)
		}
		tool := sdk.ToolUnionParamOfTool(schema, t.Name)
		if t.Description != "" {
			tool.OfTool.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, tool)
	}
	return params, nil
}

// thinkingBudget is the budget_tokens of a turn: the session's thinking
// level when set, else Config.ThinkingBudget.
func thinkingBudget(cfg Config, level provider.ThinkingLevel) int64 {
	if b := level.Budget(); b > 0 {
		return b
	}
	return cfg.ThinkingBudget
}

// inputSchema is the tool's JSON schema, sent verbatim; an empty schema is
// {"type":"object"} and a schema without "type" gets "type":"object".
func inputSchema(schemaJSON string) (sdk.ToolInputSchemaParam, error) {
	s := strings.TrimSpace(schemaJSON)
	if s == "" {
		s = `{"type":"object"}`
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil || m == nil {
		return sdk.ToolInputSchemaParam{}, fmt.Errorf("input schema is not a JSON object: %q", truncate(s, 200))
	}
	if _, ok := m["type"]; !ok {
		m["type"] = "object"
		b, err := json.Marshal(m)
		if err != nil {
			return sdk.ToolInputSchemaParam{}, fmt.Errorf("input schema: %w", err)
		}
		s = string(b)
	}
	return param.Override[sdk.ToolInputSchemaParam](json.RawMessage(s)), nil
}

// contextBuilder turns context entries into API messages, keeping
// the request well formed for the API:
//   - consecutive tool results share one user message, right after the
//     assistant message whose tool calls they answer;
//   - a tool result for a call not in the preceding assistant message is
//     dropped, and a tool call left without a result gets an error result;
//   - assistant turns that ended in error or abort contribute their text
//     only (their thinking signatures and tool calls may be incomplete);
//   - thinking from another provider, or unsigned, is replayed as text;
//   - empty texts and empty messages are left out (the API rejects them).
type contextBuilder struct {
	out     []sdk.MessageParam
	results *sdk.UserMessageParam // the user message collecting tool results
	pending []string              // tool call ids of the last assistant message without a result yet
}

func convertContext(entries []*messages.Entry) []sdk.MessageParam {
	var b contextBuilder
	for _, e := range entries {
		switch {
		case e.GetUser() != nil:
			b.closeTurn()
			if text := e.GetUser().GetText(); text != "" {
				b.out = append(b.out, sdk.NewUserMessage(sdk.NewTextBlock(text)))
			}
		case e.GetAssistant() != nil:
			b.assistant(e.GetAssistant())
		case e.GetToolResult() != nil:
			b.toolResult(e.GetToolResult())
		}
		// Model changes and unknown entries carry nothing for the model.
	}
	b.closeTurn()
	return b.out
}

func (b *contextBuilder) assistant(m *messages.AssistantMessage) {
	failed := m.GetStopReason() == messages.StopReason_STOP_REASON_ERROR ||
		m.GetStopReason() == messages.StopReason_STOP_REASON_ABORTED
	ours := m.GetProvider() == "" || m.GetProvider() == ProviderName
	var blocks []sdk.ContentBlockParamUnion
	var calls []string
	for _, c := range m.GetContent() {
		switch {
		case c.GetText() != nil:
			if t := c.GetText().GetText(); t != "" {
				blocks = append(blocks, sdk.NewTextBlock(t))
			}
		case c.GetThinking() != nil && !failed:
			th := c.GetThinking()
			switch {
			case ours && th.GetSignature() != "":
				blocks = append(blocks, sdk.NewThinkingBlock(th.GetSignature(), th.GetThinking()))
			case th.GetThinking() != "":
				blocks = append(blocks, sdk.NewTextBlock(th.GetThinking()))
			}
		case c.GetRedactedThinking() != nil && !failed && ours:
			if d := c.GetRedactedThinking().GetData(); d != "" {
				blocks = append(blocks, sdk.NewRedactedThinkingBlock(d))
			}
		case c.GetToolCall() != nil && !failed:
			tc := c.GetToolCall()
			args := tc.GetArgumentsJson()
			if !validJSONObject(args) {
				args = "{}"
			}
			id := toolID(tc.GetId())
			blocks = append(blocks, sdk.NewToolUseBlock(id, json.RawMessage(args), tc.GetName()))
			calls = append(calls, id)
		}
	}
	if len(blocks) == 0 {
		return
	}
	b.closeTurn()
	b.out = append(b.out, sdk.NewAssistantMessage(blocks...))
	b.pending = calls
}

func (b *contextBuilder) toolResult(r *messages.ToolResult) {
	id := toolID(r.GetToolCallId())
	i := indexOf(b.pending, id)
	if i < 0 {
		return // answers no call of the preceding assistant message
	}
	b.pending = append(b.pending[:i:i], b.pending[i+1:]...)
	b.addResult(id, r.GetOutput(), r.GetIsError())
}

func (b *contextBuilder) addResult(id, output string, isError bool) {
	block := sdk.ToolResultBlockParam{ToolUseID: id}
	if output != "" {
		block.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: output}}}
	}
	if isError {
		block.IsError = sdk.Bool(true)
	}
	if b.results == nil {
		b.out = append(b.out, sdk.MessageParam{OfUser: &sdk.UserMessageParam{}})
		b.results = b.out[len(b.out)-1].OfUser
	}
	b.results.Content = append(b.results.Content, sdk.ContentBlockParamUnion{OfToolResult: &block})
}

// closeTurn ends the tool results of the last assistant message, answering
// calls that got no result.
func (b *contextBuilder) closeTurn() {
	for _, id := range b.pending {
		b.addResult(id, missingToolResult, true)
	}
	b.pending = nil
	b.results = nil
}

// toolID makes an id match the API's pattern ^[a-zA-Z0-9_-]+$ (ids from
// other providers may hold other characters). Calls and results are mapped
// alike, so they still pair up.
func toolID(id string) string {
	if id == "" {
		return "toolu_missing"
	}
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			return r
		}
		return '_'
	}, id)
}

func indexOf(ids []string, id string) int {
	for i, v := range ids {
		if v == id {
			return i
		}
	}
	return -1
}
