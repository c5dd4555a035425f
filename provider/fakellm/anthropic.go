package fakellm

import (
	"encoding/base64"
	"encoding/json"
)

// Anthropic Messages API (POST /v1/messages).

var anthropicStop = map[string]string{
	stopEnd:     "end_turn",
	stopLength:  "max_tokens",
	stopTool:    "tool_use",
	stopRefusal: "refusal",
}

func signature(id string) string {
	return base64.StdEncoding.EncodeToString([]byte("fakellm-signature:" + id))
}

// toolInput is the tool arguments as a JSON object for a complete message;
// arguments that are not a JSON object become {}.
func toolInput(args string) any {
	var m map[string]any
	if json.Unmarshal([]byte(args), &m) != nil {
		return obj{}
	}
	return json.RawMessage(args)
}

// anthropicStopDetails is the stop_details of a message, which the API
// always sends: null, or for a refusal with stop details the Messages
// API's refusal object, its category and explanation (null when the
// scenario leaves them out). Other keys and an error text have no place
// in the API and are not sent.
func anthropicStopDetails(c *content) any {
	if c.stop != stopRefusal || c.stopDetails == nil {
		return nil
	}
	return obj{"type", "refusal", "category", nullable(c.stopDetails["category"]),
		"explanation", nullable(c.stopDetails["explanation"])}
}

// anthropicSteps is a Messages stream: message_start, ping, the content
// blocks (thinking, text, tool_use) with their deltas, message_delta (with
// stop_details) and message_stop.
func (s *Server) anthropicSteps(req *apiRequest, c *content) steps {
	id := s.letterID("msg_fakellm")
	b := &anthropicBlocks{index: -1}
	for _, f := range anthropicOpening(req, id) {
		b.add(f)
	}

	if len(c.thinkingC) > 0 {
		b.start(obj{"type", "thinking", "thinking", "", "signature", ""})
		b.eachChunk(c.thinkingC, func(p string) { b.delta(obj{"type", "thinking_delta", "thinking", p}) })
		b.delta(obj{"type", "signature_delta", "signature", signature(id)})
		b.stop()
	}
	if len(c.textC) > 0 {
		b.start(obj{"type", "text", "text", ""})
		b.eachChunk(c.textC, func(p string) { b.delta(obj{"type", "text_delta", "text", p}) })
		b.stop()
	}
	if c.tool != nil {
		b.start(obj{"type", "tool_use", "id", s.letterID("toolu_fakellm"), "name", c.tool.Name, "input", obj{}})
		b.eachChunk(c.argsC, func(p string) { b.delta(obj{"type", "input_json_delta", "partial_json", p}) })
		b.stop()
	}
	b.add(eventFrame("message_delta", obj{"type", "message_delta",
		"delta", obj{"stop_reason", anthropicStop[c.stop], "stop_sequence", nil, "stop_details", anthropicStopDetails(c)},
		"usage", obj{"output_tokens", c.outputTokens()}}))
	b.add(eventFrame("message_stop", obj{"type", "message_stop"}))
	return b.finish()
}

// anthropicOpening is what Messages stream id opens with: message_start
// and ping.
func anthropicOpening(req *apiRequest, id string) [][]byte {
	return [][]byte{
		eventFrame("message_start", obj{"type", "message_start", "message", obj{
			"id", id, "type", "message", "role", "assistant", "model", req.Model,
			"content", []any{}, "stop_reason", nil, "stop_sequence", nil, "stop_details", nil,
			"usage", obj{"input_tokens", req.inputTokens, "cache_creation_input_tokens", 0,
				"cache_read_input_tokens", 0, "output_tokens", 1},
		}}),
		eventFrame("ping", obj{"type", "ping"}),
	}
}

// anthropicBlocks builds a Messages stream, numbering its content blocks.
type anthropicBlocks struct {
	stepBuilder
	index int // the current block's, -1 before the first
}

// start adds the content_block_start of the next block.
func (b *anthropicBlocks) start(block obj) {
	b.index++
	b.add(eventFrame("content_block_start", obj{"type", "content_block_start", "index", b.index, "content_block", block}))
}

// delta adds a content_block_delta to the current block.
func (b *anthropicBlocks) delta(d obj) {
	b.add(eventFrame("content_block_delta", obj{"type", "content_block_delta", "index", b.index, "delta", d}))
}

// stop adds the content_block_stop of the current block.
func (b *anthropicBlocks) stop() {
	b.add(eventFrame("content_block_stop", obj{"type", "content_block_stop", "index", b.index}))
}

// anthropicMessage is the whole message of a non-streaming request.
func (s *Server) anthropicMessage(req *apiRequest, c *content) obj {
	id := s.letterID("msg_fakellm")
	blocks := []any{}
	if c.thinking != "" {
		blocks = append(blocks, obj{"type", "thinking", "thinking", c.thinking, "signature", signature(id)})
	}
	if c.text != "" {
		blocks = append(blocks, obj{"type", "text", "text", c.text})
	}
	if c.tool != nil {
		blocks = append(blocks, obj{"type", "tool_use", "id", s.letterID("toolu_fakellm"), "name", c.tool.Name, "input", toolInput(c.args)})
	}
	return obj{
		"id", id, "type", "message", "role", "assistant", "model", req.Model,
		"content", blocks, "stop_reason", anthropicStop[c.stop], "stop_sequence", nil, "stop_details", anthropicStopDetails(c),
		"usage", obj{"input_tokens", req.inputTokens, "cache_creation_input_tokens", 0,
			"cache_read_input_tokens", 0, "output_tokens", c.outputTokens()},
	}
}
