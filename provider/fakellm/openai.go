package fakellm

// OpenAI Chat Completions (POST /v1/chat/completions) and Responses
// (POST /v1/responses).

var chatFinish = map[string]string{
	stopEnd:     "stop",
	stopLength:  "length",
	stopTool:    "tool_calls",
	stopRefusal: "content_filter",
}

func (r *apiRequest) includeUsage() bool {
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

func chatUsage(req *apiRequest, c *content) obj {
	out := c.outputTokens()
	return obj{"prompt_tokens", req.inputTokens, "completion_tokens", out, "total_tokens", req.inputTokens + out,
		"prompt_tokens_details", obj{"cached_tokens", 0, "audio_tokens", 0},
		"completion_tokens_details", obj{"reasoning_tokens", 0, "audio_tokens", 0,
			"accepted_prediction_tokens", 0, "rejected_prediction_tokens", 0}}
}

// chatSteps is a chat.completion.chunk stream: a role chunk, the thinking
// deltas (in reasoning_content or reasoning, as OpenAI-compatible servers
// send reasoning), the content and tool_calls deltas, the finish_reason
// chunk (with stop_details and an error object when the scenario says), the
// usage chunk when stream_options.include_usage is set, and [DONE].
func (s *Server) chatSteps(req *apiRequest, c *content) steps {
	k := s.chatChunks(req)
	b := &stepBuilder{}
	b.add(k.opening())
	b.eachChunk(c.thinkingC, func(p string) { b.add(k.delta(obj{c.reasoningField, p}, nil)) })
	b.eachChunk(c.textC, func(p string) { b.add(k.delta(obj{"content", p}, nil)) })
	if c.tool != nil {
		callID := s.letterID("call_fakellm")
		for i, p := range c.argsC {
			b.add(k.delta(obj{"tool_calls", []any{chatToolCallDelta(i, callID, c.tool.Name, p)}}, nil))
			b.chunk()
		}
	}
	finish := c.withStopDetails(chatChoice(obj{}, chatFinish[c.stop]))
	if c.stopError != "" {
		b.add(k.frame(finish, "error", chatStopError(c.stopError)))
		b.add(doneFrame)
		return b.finish()
	}
	b.add(k.frame(finish))
	if k.usage {
		b.add(dataFrame(append(k.head(), "choices", []any{}, "usage", chatUsage(req, c))))
	}
	b.add(doneFrame)
	return b.finish()
}

// chatChunks makes the chat.completion.chunk frames of one stream.
type chatChunks struct {
	id      string
	created int64
	model   string
	usage   bool // stream_options.include_usage: every chunk has a "usage" key
}

// chatChunks starts the chunks of a stream answering req.
func (s *Server) chatChunks(req *apiRequest) chatChunks {
	return chatChunks{id: s.letterID("chatcmpl-fakellm"), created: now(), model: req.Model, usage: req.includeUsage()}
}

// opening is the chunk a stream opens with: the assistant's role.
func (k chatChunks) opening() []byte {
	return k.delta(obj{"role", "assistant", "content", "", "refusal", nil}, nil)
}

// head is a fresh copy of the fields every chunk of the stream starts with.
func (k chatChunks) head() obj {
	return obj{"id", k.id, "object", "chat.completion.chunk", "created", k.created, "model", k.model,
		"service_tier", "default", "system_fingerprint", "fp_fakellm"}
}

// frame is the chunk with the one choice ch, then the extra key-value
// pairs.
func (k chatChunks) frame(ch obj, extra ...any) []byte {
	o := append(k.head(), "choices", []any{ch})
	if k.usage {
		o = append(o, "usage", nil)
	}
	return dataFrame(append(o, extra...))
}

// delta is the chunk whose choice carries delta and finish.
func (k chatChunks) delta(delta obj, finish any) []byte {
	return k.frame(chatChoice(delta, finish))
}

// chatChoice is a streamed choice: its delta and finish_reason.
func chatChoice(delta obj, finish any) obj {
	return obj{"index", 0, "delta", delta, "logprobs", nil, "finish_reason", finish}
}

// chatToolCallDelta is the tool_calls entry of the i-th piece of the
// arguments; the first one also gives the call's id, type and name.
func chatToolCallDelta(i int, callID, name, args string) obj {
	if i == 0 {
		return obj{"index", 0, "id", callID, "type", "function", "function", obj{"name", name, "arguments", args}}
	}
	return obj{"index", 0, "function", obj{"arguments", args}}
}

// chatCompletion is the whole chat.completion of a non-streaming request
// (with stop_details on the choice and an error object when the scenario
// says, as on the finish chunk of a stream).
func (s *Server) chatCompletion(req *apiRequest, c *content) obj {
	msg := obj{"role", "assistant", "content", nullable(c.text), "refusal", nil, "annotations", []any{}}
	if c.thinking != "" {
		msg = append(msg, c.reasoningField, c.thinking)
	}
	if c.tool != nil {
		msg = append(msg, "tool_calls", []any{obj{"id", s.letterID("call_fakellm"), "type", "function",
			"function", obj{"name", c.tool.Name, "arguments", c.args}}})
	}
	out := obj{"id", s.letterID("chatcmpl-fakellm"), "object", "chat.completion", "created", now(), "model", req.Model,
		"choices", []any{c.withStopDetails(obj{"index", 0, "message", msg, "logprobs", nil, "finish_reason", chatFinish[c.stop]})},
		"usage", chatUsage(req, c), "service_tier", "default", "system_fingerprint", "fp_fakellm"}
	if c.stopError != "" {
		out = append(out, "error", chatStopError(c.stopError))
	}
	return out
}

// withStopDetails is a finish choice with the scenario's stop_details, as
// a gateway sends them beside a content_filter finish reason.
func (c *content) withStopDetails(choice obj) obj {
	if c.stopDetails == nil {
		return choice
	}
	return append(choice, "stop_details", c.stopDetails)
}

// chatStopError is the error object a gateway sends with a content_filter
// finish: on the finish chunk of a stream, beside the choices of a whole
// chat.completion.
func chatStopError(message string) obj {
	return obj{"message", message, "type", "content_filter", "param", nil, "code", "content_filter"}
}

// respIDs are the ids of one response's output items.
type respIDs struct {
	reasoning, message, function, call string
}

func (s *Server) newRespIDs() respIDs {
	return respIDs{
		reasoning: s.letterID("rs_fakellm"),
		message:   s.letterID("msg_fakellm"),
		function:  s.letterID("fc_fakellm"),
		call:      s.letterID("call_fakellm"),
	}
}

// incompleteReason is the Responses incomplete_details.reason for a stop,
// or "" when the response completes.
func incompleteReason(stop string) string {
	switch stop {
	case stopLength:
		return "max_output_tokens"
	case stopRefusal:
		return "content_filter"
	}
	return ""
}

func reasoningItem(id, text string) obj {
	return obj{"id", id, "type", "reasoning", "summary", []any{obj{"type", "summary_text", "text", text}}}
}

func outputText(text string) obj {
	return obj{"type", "output_text", "annotations", []any{}, "logprobs", []any{}, "text", text}
}

func messageItem(id, text, status string) obj {
	return obj{"id", id, "type", "message", "status", status, "content", []any{outputText(text)}, "role", "assistant"}
}

func functionItem(ids respIDs, tool *ToolCall, args, status string) obj {
	return obj{"id", ids.function, "type", "function_call", "status", status, "arguments", args,
		"call_id", ids.call, "name", tool.Name}
}

// responsesOutput is the output array of a finished response.
func responsesOutput(c *content, ids respIDs) []any {
	status := "completed"
	if incompleteReason(c.stop) != "" {
		status = "incomplete"
	}
	out := []any{}
	if c.thinking != "" {
		out = append(out, reasoningItem(ids.reasoning, c.thinking))
	}
	if c.text != "" {
		out = append(out, messageItem(ids.message, c.text, status))
	}
	if c.tool != nil {
		out = append(out, functionItem(ids, c.tool, c.args, "completed"))
	}
	return out
}

// responseObject is a Responses "response" object. A finished one
// (output != nil) carries its status and usage.
func responseObject(req *apiRequest, c *content, id string, created int64, output []any) obj {
	status, details, usage := "in_progress", any(nil), any(nil)
	if output == nil {
		output = []any{}
	} else {
		status = "completed"
		if reason := incompleteReason(c.stop); reason != "" {
			status, details = "incomplete", obj{"reason", reason}
		}
		out := c.outputTokens()
		reasoning := 0
		if c.thinking != "" {
			reasoning = max(1, len(c.thinking)/4)
		}
		usage = obj{"input_tokens", req.inputTokens, "input_tokens_details", obj{"cached_tokens", 0},
			"output_tokens", out, "output_tokens_details", obj{"reasoning_tokens", reasoning},
			"total_tokens", req.inputTokens + out}
	}
	store := req.Store == nil || *req.Store
	return obj{"id", id, "object", "response", "created_at", created, "status", status,
		"background", false, "error", nil, "incomplete_details", details,
		"instructions", nil, "max_output_tokens", nil, "model", req.Model, "output", output,
		"parallel_tool_calls", true, "previous_response_id", nullable(req.PreviousResponseID),
		"reasoning", obj{"effort", nil, "summary", nil}, "service_tier", "default", "store", store,
		"temperature", 1.0, "text", obj{"format", obj{"type", "text"}}, "tool_choice", "auto",
		"tools", []any{}, "top_p", 1.0, "truncation", "disabled", "usage", usage, "user", nil,
		"metadata", obj{}}
}

// responsesFull is the response object of a non-streaming request.
func (s *Server) responsesFull(req *apiRequest, c *content, id string) obj {
	return responseObject(req, c, id, now(), responsesOutput(c, s.newRespIDs()))
}

// responsesSteps is a Responses stream: response.created,
// response.in_progress, one output item per part (reasoning summary,
// message with output_text deltas, function_call with arguments deltas),
// then response.completed (or response.incomplete for length and
// refusal stops). It returns the response id.
func (s *Server) responsesSteps(req *apiRequest, c *content) (steps, string) {
	id := s.responseID()
	ids := s.newRespIDs()
	created := now()
	e := &responsesEvents{}
	e.open(req, c, id, created)

	final := responsesOutput(c, ids)
	index := -1
	if c.thinking != "" {
		index++
		e.reasoning(index, ids.reasoning, c, final[index])
	}
	if c.text != "" {
		index++
		e.message(index, ids.message, c, final[index])
	}
	if c.tool != nil {
		index++
		e.functionCall(index, ids, c, final[index])
	}
	done := responseObject(req, c, id, created, final)
	if incompleteReason(c.stop) != "" {
		e.event("response.incomplete", "response", done)
	} else {
		e.event("response.completed", "response", done)
	}
	return e.finish(), id
}

// responsesEvents builds a Responses stream, numbering its events.
type responsesEvents struct {
	stepBuilder
	seq int
}

// event adds the event typ with fields, then its sequence_number.
func (e *responsesEvents) event(typ string, fields ...any) {
	o := append(obj{"type", typ}, fields...)
	o = append(o, "sequence_number", e.seq)
	e.seq++
	e.add(eventFrame(typ, o))
}

// open adds what a stream opens with: response.created and
// response.in_progress of response id.
func (e *responsesEvents) open(req *apiRequest, c *content, id string, created int64) {
	e.event("response.created", "response", responseObject(req, c, id, created, nil))
	e.event("response.in_progress", "response", responseObject(req, c, id, created, nil))
}

// reasoning streams the reasoning item at index: its summary part with
// the thinking deltas, then the finished item done.
func (e *responsesEvents) reasoning(index int, item string, c *content, done any) {
	e.event("response.output_item.added", "output_index", index, "item", obj{"id", item, "type", "reasoning", "summary", []any{}})
	e.event("response.reasoning_summary_part.added", "item_id", item, "output_index", index, "summary_index", 0,
		"part", obj{"type", "summary_text", "text", ""})
	e.eachChunk(c.thinkingC, func(p string) {
		e.event("response.reasoning_summary_text.delta", "item_id", item, "output_index", index, "summary_index", 0, "delta", p)
	})
	e.event("response.reasoning_summary_text.done", "item_id", item, "output_index", index, "summary_index", 0, "text", c.thinking)
	e.event("response.reasoning_summary_part.done", "item_id", item, "output_index", index, "summary_index", 0,
		"part", obj{"type", "summary_text", "text", c.thinking})
	e.event("response.output_item.done", "output_index", index, "item", done)
}

// message streams the message item at index: its output_text part with
// the text deltas, then the finished item done.
func (e *responsesEvents) message(index int, item string, c *content, done any) {
	e.event("response.output_item.added", "output_index", index, "item",
		obj{"id", item, "type", "message", "status", "in_progress", "content", []any{}, "role", "assistant"})
	e.event("response.content_part.added", "item_id", item, "output_index", index, "content_index", 0, "part", outputText(""))
	e.eachChunk(c.textC, func(p string) {
		e.event("response.output_text.delta", "item_id", item, "output_index", index, "content_index", 0,
			"delta", p, "logprobs", []any{})
	})
	e.event("response.output_text.done", "item_id", item, "output_index", index, "content_index", 0,
		"text", c.text, "logprobs", []any{})
	e.event("response.content_part.done", "item_id", item, "output_index", index, "content_index", 0, "part", outputText(c.text))
	e.event("response.output_item.done", "output_index", index, "item", done)
}

// functionCall streams the function_call item at index: the arguments
// deltas, then the finished item done.
func (e *responsesEvents) functionCall(index int, ids respIDs, c *content, done any) {
	item := ids.function
	e.event("response.output_item.added", "output_index", index, "item", functionItem(ids, c.tool, "", "in_progress"))
	e.eachChunk(c.argsC, func(p string) {
		e.event("response.function_call_arguments.delta", "item_id", item, "output_index", index, "delta", p)
	})
	e.event("response.function_call_arguments.done", "item_id", item, "output_index", index, "name", c.tool.Name, "arguments", c.args)
	e.event("response.output_item.done", "output_index", index, "item", done)
}
