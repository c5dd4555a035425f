package openai

import (
	"strings"

	oai "github.com/openai/openai-go/v3"

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
	text    strings.Builder
	calls   []*chatCall
	byIndex map[int64]*chatCall
	finish  string
}

func (s *chatState) content() []*messages.ContentBlock {
	var out []*messages.ContentBlock
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
	return params, nil
}

func (p *Provider) streamChat(t *turn, req provider.Request) *messages.AssistantMessage {
	params, err := p.chatParams(req)
	if err != nil {
		return provider.Failure(0, err.Error(), nil)
	}
	stream := p.client.Chat.Completions.NewStreaming(t.reqCtx, params, p.requestOptions(req, &t.res)...)
	defer stream.Close()

	s := &chatState{byIndex: map[int64]*chatCall{}}
	for stream.Next() {
		chunk := stream.Current()
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			d := ch.Delta
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
		}
	}
	content := s.content()
	if err := stream.Err(); err != nil && s.finish == "" {
		return t.failure(err, content)
	}
	// A stream that breaks after the finish reason (say, before a usage
	// chunk or [DONE]) has delivered the whole turn.
	if s.finish == "" {
		return t.incomplete(content, "finish_reason")
	}
	switch s.finish {
	case "length":
		return t.success(content, messages.StopReason_STOP_REASON_LENGTH)
	case "content_filter":
		return t.sensitive(content, "The response was stopped by the provider's content filter (finish_reason: content_filter)")
	}
	if len(s.calls) > 0 {
		return t.success(content, messages.StopReason_STOP_REASON_TOOL_USE)
	}
	return t.success(content, messages.StopReason_STOP_REASON_STOP)
}
