package openai

import (
	"encoding/json"
	"errors"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// chatCall is a tool call being assembled from Chat Completions deltas.
type chatCall struct {
	id, name string
	args     strings.Builder
}

// chatState accumulates one streamed chat completion (choice 0).
type chatState struct {
	thinking strings.Builder
	text     strings.Builder
	calls    []*chatCall
	byIndex  map[int64]*chatCall
	finish   string
	details  *messages.StopDetails // structured stop details sent with the finish reason
}

func (s *chatState) content() []*messages.ContentBlock {
	var out []*messages.ContentBlock
	if s.thinking.Len() > 0 {
		out = append(out, thinkingBlock(s.thinking.String()))
	}
	if s.text.Len() > 0 {
		out = append(out, textBlock(s.text.String()))
	}
	for _, c := range s.calls {
		out = append(out, toolBlock(c.id, c.name, c.args.String()))
	}
	return out
}

// call returns the call a tool-call delta belongs to. Deltas are keyed by
// index; a delta bringing a new id at an index already used starts a new
// call (some compatible servers send every call at index 0).
func (s *chatState) call(d oai.ChatCompletionChunkChoiceDeltaToolCall) *chatCall {
	c := s.byIndex[d.Index]
	if c == nil || (d.ID != "" && c.id != "" && d.ID != c.id) {
		c = &chatCall{}
		s.calls = append(s.calls, c)
		s.byIndex[d.Index] = c
	}
	return c
}

func (p *Provider) chatParams(req provider.Request) (oai.ChatCompletionNewParams, error) {
	params := oai.ChatCompletionNewParams{
		Model:    req.Model,
		Messages: chatMessages(itemsOf(req.Context)),
	}
	tools, err := chatTools(req.Tools)
	if err != nil {
		return params, err
	}
	params.Tools = tools
	if p.cfg.MaxTokens > 0 {
		params.MaxCompletionTokens = oai.Int(p.cfg.MaxTokens)
	}
	params.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
	if e := req.Thinking.Effort(); e != "" {
		params.ReasoningEffort = oai.ReasoningEffort(e)
	}
	return params, nil
}

func (p *Provider) streamChat(t *turn, req provider.Request) *messages.AssistantMessage {
	params, err := p.chatParams(req)
	if err != nil {
		return provider.Failure(0, err.Error(), nil)
	}
	stream := p.chat.NewStreaming(t.reqCtx, params, p.requestOptions(req, &t.res)...)
	defer stream.Close()
	t.received()

	s := &chatState{byIndex: map[int64]*chatCall{}}
	for stream.Next() {
		s.add(t, stream.Current())
	}
	err = stream.Err()
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		// The SDK stops at a chunk that carries "error"; a gateway may
		// send it on the chunk that also holds the finish reason (a content
		// filter's refusal): read what else that chunk says.
		var chunk oai.ChatCompletionChunk
		if json.Unmarshal(streamErr.Event.Data, &chunk) == nil {
			s.add(t, chunk)
		}
	}
	content := s.content()
	if s.finish == "content_filter" {
		// A classifier refusal, whatever error text came with it.
		return t.sensitive(content, streamErrorMessage(streamErr), s.details,
			"The response was stopped by the provider's content filter (finish_reason: content_filter)")
	}
	if err != nil && s.finish == "" {
		return t.failure(err, content)
	}
	// A stream that breaks after the finish reason (say, before a usage
	// chunk or [DONE]) has delivered the whole turn.
	if s.finish == "" {
		return t.incomplete(content, "finish_reason")
	}
	if s.finish == "length" {
		return t.success(content, messages.StopReason_STOP_REASON_LENGTH)
	}
	if len(s.calls) > 0 {
		return t.success(content, messages.StopReason_STOP_REASON_TOOL_USE)
	}
	return t.success(content, messages.StopReason_STOP_REASON_STOP)
}

// add takes one chunk: the delta of choice 0 and any structured stop
// details, on the choice or on the chunk.
func (s *chatState) add(t *turn, chunk oai.ChatCompletionChunk) {
	for _, ch := range chunk.Choices {
		if ch.Index == 0 {
			s.addChoice(t, ch)
		}
	}
	if chunk.Model != "" {
		t.model = chunk.Model
	}
	if chunk.JSON.Usage.Valid() {
		u := chunk.Usage
		t.setUsage(u.PromptTokens, u.PromptTokensDetails.CachedTokens, u.CompletionTokens)
	}
	if d := stopDetails(chunk.JSON.ExtraFields["stop_details"].Raw()); d != nil && s.details == nil {
		s.details = d
	}
}

// addChoice takes one delta of choice 0: reasoning, text, tool calls, the
// finish reason and its stop details.
func (s *chatState) addChoice(t *turn, ch oai.ChatCompletionChunkChoice) {
	d := ch.Delta
	for _, key := range reasoningKeys {
		if piece := jsonString(d.JSON.ExtraFields[key].Raw()); piece != "" {
			s.thinking.WriteString(piece)
			t.thinking(piece)
		}
	}
	// A refusal is the model's own answer; it is shown as text.
	for _, piece := range [...]string{d.Content, d.Refusal} {
		if piece != "" {
			s.text.WriteString(piece)
			t.text(piece)
		}
	}
	for _, tc := range d.ToolCalls {
		c := s.call(tc)
		if tc.ID != "" {
			c.id = tc.ID
		}
		if tc.Function.Name != "" {
			c.name = tc.Function.Name
		}
		c.args.WriteString(tc.Function.Arguments)
		t.toolCall(tc.Function.Arguments)
	}
	if ch.FinishReason != "" {
		s.finish = ch.FinishReason
	}
	if d := stopDetails(ch.JSON.ExtraFields["stop_details"].Raw()); d != nil {
		s.details = d
	}
}

// reasoningKeys are the delta fields OpenAI-compatible servers stream
// reasoning in: reasoning_content (DeepSeek, vLLM, SGLang, llama.cpp,
// LiteLLM) and reasoning (OpenRouter). A server sends one of them.
var reasoningKeys = [...]string{"reasoning_content", "reasoning"}

// jsonString is raw JSON as a string; null, absent or not a string is "".
func jsonString(raw string) string {
	if raw == "" || raw[0] != '"' {
		return ""
	}
	var out string
	if json.Unmarshal([]byte(raw), &out) != nil {
		return ""
	}
	return out
}

// stopDetails reads a structured stop_details object, as some gateways send
// with a content-filter stop: its type and its other string fields
// (category, explanation, ...). Anything else is nil.
func stopDetails(raw string) *messages.StopDetails {
	if raw == "" || raw[0] != '{' {
		return nil
	}
	var fields map[string]any
	if json.Unmarshal([]byte(raw), &fields) != nil {
		return nil
	}
	d := &messages.StopDetails{Fields: map[string]string{}}
	for k, v := range fields {
		str, ok := v.(string)
		switch {
		case !ok:
		case k == "type":
			d.Type = str
		default:
			d.Fields[k] = str
		}
	}
	return d
}
