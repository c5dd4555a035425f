package openai

import (
	"encoding/binary"
	"hash/maphash"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// chain is what a session remembers of its last completed response: the
// id, and the runtime-context prefix the response covered (its input
// entries; the entry after them is the response's own output).
type chain struct {
	id         string
	covered    int    // number of input entries
	prefix     uint64 // hash of those entries
	model      string
	credential string
}

// prefixHash fingerprints entries, so a context that was rewritten (by
// compaction, or a stripped error) is not chained to a response that saw
// another one.
func (p *Provider) prefixHash(entries []*messages.Entry) uint64 {
	var h maphash.Hash
	h.SetSeed(p.seed)
	opts := proto.MarshalOptions{Deterministic: true}
	var buf []byte
	for _, e := range entries {
		buf, _ = opts.MarshalAppend(buf[:0], e)
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(buf)))])
		h.Write(buf)
	}
	return h.Sum64()
}

// plan chooses what to send: the items of entries after the covered prefix
// with previous_response_id when the session's chain still fits the
// context, else everything without it.
func (p *Provider) plan(req provider.Request, items []item) (send []item, prevID string, epoch uint64) {
	p.mu.Lock()
	st := p.sessions[req.SessionID]
	epoch = p.epochs[req.SessionID]
	p.mu.Unlock()
	if st == nil || st.model != req.Model || st.credential != req.Credential || len(req.Context) <= st.covered {
		return items, "", epoch
	}
	if p.prefixHash(req.Context[:st.covered]) != st.prefix {
		return items, "", epoch
	}
	start := st.covered
	if req.Context[start].GetAssistant() != nil {
		start++ // the response's own output, which the server already has
	}
	for i, it := range items {
		if it.from >= start {
			return items[i:], st.id, epoch
		}
	}
	return items, "", epoch // nothing new: send the whole context
}

// remember records a completed response for the session, unless the
// session was reset while the call ran.
func (p *Provider) remember(req provider.Request, id string, epoch uint64) {
	var st *chain
	if id != "" {
		st = &chain{id: id, covered: len(req.Context), prefix: p.prefixHash(req.Context), model: req.Model, credential: req.Credential}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epochs[req.SessionID] != epoch {
		return
	}
	if st == nil {
		delete(p.sessions, req.SessionID)
		return
	}
	p.sessions[req.SessionID] = st
}

// respItem is one output item being assembled from Responses API events.
type respItem struct {
	call         bool
	reasoning    bool // a reasoning item: text is its summary
	callID, name string
	text, args   strings.Builder
}

// respState accumulates one streamed response.
type respState struct {
	items   []*respItem
	byID    map[string]*respItem
	byIndex map[int64]*respItem
	id      string
	final   *responses.Response
	end     string // the terminal event type
	errText string // from an "error" event
}

func (s *respState) item(itemID string, outputIndex int64) *respItem {
	if itemID != "" {
		if it := s.byID[itemID]; it != nil {
			return it
		}
	} else if it := s.byIndex[outputIndex]; it != nil {
		return it
	}
	it := &respItem{}
	s.items = append(s.items, it)
	if itemID != "" {
		s.byID[itemID] = it
	}
	if _, ok := s.byIndex[outputIndex]; !ok {
		s.byIndex[outputIndex] = it
	}
	return it
}

func (s *respState) content() []*messages.ContentBlock {
	if s.final != nil {
		if c := outputContent(s.final.Output); len(c) > 0 {
			return c
		}
	}
	var out []*messages.ContentBlock
	for _, it := range s.items {
		switch {
		case it.call:
			out = append(out, toolBlock(it.callID, it.name, it.args.String()))
		case it.reasoning && it.text.Len() > 0:
			out = append(out, thinkingBlock(it.text.String()))
		case it.text.Len() > 0:
			out = append(out, textBlock(it.text.String()))
		}
	}
	return out
}

// outputContent maps a final response's output items to content blocks:
// reasoning summaries (as thinking), message text (and refusals, as text)
// and function calls; other items are left out.
func outputContent(output []responses.ResponseOutputItemUnion) []*messages.ContentBlock {
	var out []*messages.ContentBlock
	for _, o := range output {
		switch o.Type {
		case "reasoning":
			var parts []string
			for _, p := range o.Summary {
				if p.Text != "" {
					parts = append(parts, p.Text)
				}
			}
			if len(parts) > 0 {
				out = append(out, thinkingBlock(strings.Join(parts, "\n\n")))
			}
		case "message":
			var b strings.Builder
			for _, c := range o.Content {
				b.WriteString(c.Text)
				b.WriteString(c.Refusal)
			}
			if b.Len() > 0 {
				out = append(out, textBlock(b.String()))
			}
		case "function_call":
			out = append(out, toolBlock(o.CallID, o.Name, o.Arguments.OfString))
		}
	}
	return out
}

func hasCall(content []*messages.ContentBlock) bool {
	for _, b := range content {
		if b.GetToolCall() != nil {
			return true
		}
	}
	return false
}

func (p *Provider) responseParams(req provider.Request, send []item, prevID string) (responses.ResponseNewParams, error) {
	params := responses.ResponseNewParams{
		Model: req.Model,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responseInput(send)},
	}
	tools, err := responseTools(req.Tools)
	if err != nil {
		return params, err
	}
	params.Tools = tools
	if prevID != "" {
		params.PreviousResponseID = oai.String(prevID)
	}
	if p.cfg.MaxTokens > 0 {
		params.MaxOutputTokens = oai.Int(p.cfg.MaxTokens)
	}
	if e := req.Thinking.Effort(); e != "" {
		params.Reasoning = oai.ReasoningParam{Effort: oai.ReasoningEffort(e)}
	}
	return params, nil
}

// streamResponses runs one turn on the Responses API: it streams the
// response's events into the turn and ends the turn by the terminal one.
func (p *Provider) streamResponses(t *turn, req provider.Request) *messages.AssistantMessage {
	send, prevID, epoch := p.plan(req, itemsOf(req.Context))
	params, err := p.responseParams(req, send, prevID)
	if err != nil {
		return provider.Failure(0, err.Error(), nil)
	}
	stream := p.responses.NewStreaming(t.reqCtx, params, p.requestOptions(req, &t.res)...)
	defer stream.Close()
	t.received()

	s := &respState{byID: map[string]*respItem{}, byIndex: map[int64]*respItem{}}
	for stream.Next() {
		if s.apply(t, stream.Current()) {
			break
		}
	}
	content := s.content()
	if s.end == "" {
		if err := stream.Err(); err != nil {
			return t.failure(err, content)
		}
		return t.incomplete(content, "response.completed event")
	}
	if msg := s.unfinished(t, content); msg != nil {
		return msg
	}
	p.remember(req, s.id, epoch)
	if hasCall(content) {
		return t.success(content, messages.StopReason_STOP_REASON_TOOL_USE)
	}
	return t.success(content, messages.StopReason_STOP_REASON_STOP)
}

// apply takes one event of the stream into s and the turn; it reports
// whether the event ends the response.
func (s *respState) apply(t *turn, ev responses.ResponseStreamEventUnion) (end bool) {
	switch ev.Type {
	case "response.created", "response.in_progress", "response.queued":
		if ev.Response.ID != "" {
			s.id = ev.Response.ID
		}
		t.model = firstOf(string(ev.Response.Model), t.model)
	case "response.output_item.added", "response.output_item.done":
		s.outputItem(t, ev)
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		it := s.item(ev.ItemID, ev.OutputIndex)
		it.reasoning = true
		it.text.WriteString(ev.Delta)
		t.thinking(ev.Delta)
	case "response.output_text.delta", "response.refusal.delta":
		it := s.item(ev.ItemID, ev.OutputIndex)
		it.text.WriteString(ev.Delta)
		t.text(ev.Delta)
	case "response.function_call_arguments.delta":
		it := s.item(ev.ItemID, ev.OutputIndex)
		it.call = true
		it.args.WriteString(ev.Delta)
		t.toolCall(ev.Delta)
	case "response.function_call_arguments.done":
		if ev.Arguments != "" {
			it := s.item(ev.ItemID, ev.OutputIndex)
			it.call = true
			it.args.Reset()
			it.args.WriteString(ev.Arguments)
		}
	case "response.completed", "response.incomplete", "response.failed":
		s.finished(t, ev)
		return true
	case "error":
		s.end = ev.Type
		s.errText = firstOf(ev.Message, "error event without a message")
		if d := details(ev.Code, ""); d != "" {
			s.errText += " " + d
		}
		return true
	}
	return false
}

// finished takes the response's last event, completed, incomplete or
// failed: the final response, its usage, id and model.
func (s *respState) finished(t *turn, ev responses.ResponseStreamEventUnion) {
	r := ev.Response
	s.final, s.end = &r, ev.Type
	if r.JSON.Usage.Valid() {
		t.setUsage(r.Usage.InputTokens, r.Usage.InputTokensDetails.CachedTokens, r.Usage.OutputTokens)
	}
	s.id = firstOf(r.ID, s.id)
	t.model = firstOf(string(r.Model), t.model)
}

// outputItem takes an output item's start or end: a function call's id,
// name and (at its end) whole arguments, or a message.
func (s *respState) outputItem(t *turn, ev responses.ResponseStreamEventUnion) {
	switch ev.Item.Type {
	case "function_call":
		it := s.item(ev.Item.ID, ev.OutputIndex)
		it.call = true
		it.callID, it.name = firstOf(ev.Item.CallID, it.callID), firstOf(ev.Item.Name, it.name)
		if a := ev.Item.Arguments.OfString; a != "" && ev.Type == "response.output_item.done" {
			it.args.Reset()
			it.args.WriteString(a)
		}
		if ev.Type == "response.output_item.added" {
			t.toolCall("")
		}
	case "message":
		s.item(ev.Item.ID, ev.OutputIndex)
	}
}

// unfinished ends a turn whose response ended otherwise than completed (an
// error event, failed, incomplete); nil for a completed one.
func (s *respState) unfinished(t *turn, content []*messages.ContentBlock) *messages.AssistantMessage {
	switch s.end {
	case "error":
		return t.streamFailure(content, s.errText)
	case "response.failed":
		text := "response failed"
		if e := s.final.Error; e.Message != "" || e.Code != "" {
			text = firstOf(e.Message, text)
			if d := details(string(e.Code), ""); d != "" {
				text += " " + d
			}
		}
		return t.streamFailure(content, text)
	case "response.incomplete":
		switch reason := s.final.IncompleteDetails.Reason; reason {
		case "max_output_tokens":
			return t.success(content, messages.StopReason_STOP_REASON_LENGTH)
		case "content_filter":
			// The API sends no error text or stop details with it.
			return t.sensitive(content, "", nil,
				"The response was stopped by the provider's content filter (incomplete_details.reason: content_filter)")
		default:
			return t.streamFailure(content, "response incomplete: "+firstOf(reason, "no reason given"))
		}
	}
	return nil
}
