package fakellm

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The expected event sequences, per API, of a plain three-chunk text stream.
var (
	anthropicText = cat(
		[]string{"message_start", "ping", "content_block_start"},
		repeat("content_block_delta", 3),
		[]string{"content_block_stop", "message_delta", "message_stop"})
	responsesText = cat(
		[]string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"},
		repeat("response.output_text.delta", 3),
		[]string{"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"})
	chatTextEvents = repeat("data", 1+3+1+1) // role, 3 content, finish, [DONE]
)

func TestStreamTextChat(t *testing.T) {
	ts := startJSON(t, `{"default": {"text": "Hello from fakellm"}}`)
	res := ts.call(req{api: APIOpenAIChat, stream: true})
	if res.status != 200 || res.readErr != nil {
		t.Fatalf("status %d, read error %v", res.status, res.readErr)
	}
	if ct := res.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("Content-Type %q", ct)
	}
	equal(t, "events", names(res.events), chatTextEvents)
	if last := res.events[len(res.events)-1].Data; last != "[DONE]" {
		t.Errorf("last event %q, want [DONE]", last)
	}
	first := res.events[0].json(t)
	if str(first, "object") != "chat.completion.chunk" || str(first, "choices", 0, "delta", "role") != "assistant" ||
		str(first, "model") != "m" || !strings.HasPrefix(str(first, "id"), "chatcmpl-") {
		t.Errorf("first chunk %s", res.events[0].Data)
	}
	var pieces []string
	for _, e := range res.events[1:4] {
		pieces = append(pieces, str(e.json(t), "choices", 0, "delta", "content"))
	}
	equal(t, "content deltas", pieces, []string{"Hello ", "from f", "akellm"})
	text, finish := chatText(t, res.events)
	if text != "Hello from fakellm" || finish != "stop" {
		t.Errorf("text %q finish %q", text, finish)
	}
	if walk(res.events[4].json(t), "usage") != nil {
		t.Errorf("usage sent without stream_options.include_usage")
	}
}

func TestStreamTextChatUsageAndAltPath(t *testing.T) {
	ts := startJSON(t, `{"default": {"text": "abc", "chunks": 2}}`)
	r := req{api: APIOpenAIChat, stream: true, model: "m",
		extra: map[string]any{"stream_options": map[string]any{"include_usage": true}}}
	hr := r.httpRequest(t, ts.base)
	hr.URL.Path = "/chat/completions" // without /v1
	resp, err := ts.client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs, err := readSSE(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "events", names(evs), repeat("data", 1+2+1+1+1))
	usage := evs[4].json(t)
	if len(walk(usage, "choices").([]any)) != 0 || walk(usage, "usage", "total_tokens") == nil {
		t.Errorf("usage chunk %s", evs[4].Data)
	}
}

func TestStreamTextResponses(t *testing.T) {
	ts := startJSON(t, `{"default": {"text": "Hello from fakellm"}}`)
	res := ts.call(req{api: APIOpenAIResponses, stream: true})
	if res.status != 200 || res.readErr != nil {
		t.Fatalf("status %d, read error %v", res.status, res.readErr)
	}
	equal(t, "events", names(res.events), responsesText)
	for i, e := range res.events {
		m := e.json(t)
		if str(m, "type") != e.Event {
			t.Errorf("event %d: type %q under event %q", i, str(m, "type"), e.Event)
		}
		if n, ok := m["sequence_number"].(float64); !ok || int(n) != i {
			t.Errorf("event %d: sequence_number %v", i, m["sequence_number"])
		}
	}
	equal(t, "deltas", deltas(t, res.events, "response.output_text.delta", "delta"), []string{"Hello ", "from f", "akellm"})
	done := res.events[len(res.events)-1].json(t)
	id := str(done, "response", "id")
	if !strings.HasPrefix(id, "resp_") || str(done, "response", "status") != "completed" ||
		str(done, "response", "output", 0, "content", 0, "text") != "Hello from fakellm" ||
		str(done, "response", "output", 0, "type") != "message" {
		t.Errorf("response.completed %s", res.events[len(res.events)-1].Data)
	}
	if created := res.events[0].json(t); str(created, "response", "id") != id || str(created, "response", "status") != "in_progress" {
		t.Errorf("response.created %s", res.events[0].Data)
	}
}

func TestStreamTextAnthropic(t *testing.T) {
	ts := startJSON(t, `{"default": {"text": "Hello from fakellm", "chunks": 3}}`)
	res := ts.call(req{api: APIAnthropic, stream: true})
	if res.status != 200 || res.readErr != nil {
		t.Fatalf("status %d, read error %v", res.status, res.readErr)
	}
	equal(t, "events", names(res.events), anthropicText)
	for i, e := range res.events {
		if got := str(e.json(t), "type"); got != e.Event {
			t.Errorf("event %d: type %q under event %q", i, got, e.Event)
		}
	}
	start := res.events[0].json(t)
	if str(start, "message", "role") != "assistant" || str(start, "message", "model") != "m" ||
		!strings.HasPrefix(str(start, "message", "id"), "msg_") {
		t.Errorf("message_start %s", res.events[0].Data)
	}
	if got := str(res.events[2].json(t), "content_block", "type"); got != "text" {
		t.Errorf("content block %q", got)
	}
	equal(t, "deltas", deltas(t, res.events, "content_block_delta", "delta", "text"), []string{"Hello ", "from f", "akellm"})
	equal(t, "delta types", deltas(t, res.events, "content_block_delta", "delta", "type"), repeat("text_delta", 3))
	md := res.events[len(res.events)-2].json(t)
	if str(md, "delta", "stop_reason") != "end_turn" || walk(md, "usage", "output_tokens") == nil {
		t.Errorf("message_delta %s", res.events[len(res.events)-2].Data)
	}
	if res.header.Get("Request-Id") == "" {
		t.Errorf("no request-id header")
	}
}

func TestChunksSplit(t *testing.T) {
	got := split("héllo wörld", 4)
	if strings.Join(got, "") != "héllo wörld" || len(got) != 4 {
		t.Errorf("split = %q", got)
	}
	if got := split("ab", 5); len(got) != 2 {
		t.Errorf("split short = %q", got)
	}
	ts := startJSON(t, `{"default": {"text": "one two three four five", "chunks": 5}}`)
	res := ts.call(req{api: APIAnthropic, stream: true})
	if d := deltas(t, res.events, "content_block_delta", "delta", "text"); len(d) != 5 || strings.Join(d, "") != "one two three four five" {
		t.Errorf("deltas %q", d)
	}
}

func TestToolCall(t *testing.T) {
	ts := startJSON(t, `{"default": {"text": "Checking.", "chunks": 2,
		"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}}`)
	const args = `{"city":"Paris"}`

	t.Run("chat", func(t *testing.T) {
		res := ts.call(req{api: APIOpenAIChat, stream: true})
		text, finish := chatText(t, res.events)
		if text != "Checking." || finish != "tool_calls" {
			t.Errorf("text %q finish %q", text, finish)
		}
		var name, id, gotArgs string
		for _, e := range res.events {
			if e.Data == "[DONE]" {
				continue
			}
			m := e.json(t)
			if str(m, "choices", 0, "delta", "tool_calls", 0, "function", "name") != "" {
				name = str(m, "choices", 0, "delta", "tool_calls", 0, "function", "name")
				id = str(m, "choices", 0, "delta", "tool_calls", 0, "id")
				if str(m, "choices", 0, "delta", "tool_calls", 0, "type") != "function" {
					t.Errorf("tool call type: %s", e.Data)
				}
			}
			gotArgs += str(m, "choices", 0, "delta", "tool_calls", 0, "function", "arguments")
		}
		if name != "get_weather" || !strings.HasPrefix(id, "call_") || gotArgs != args {
			t.Errorf("name %q id %q args %q", name, id, gotArgs)
		}
	})
	t.Run("responses", func(t *testing.T) {
		res := ts.call(req{api: APIOpenAIResponses, stream: true})
		want := cat(
			[]string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"},
			repeat("response.output_text.delta", 2),
			[]string{"response.output_text.done", "response.content_part.done", "response.output_item.done",
				"response.output_item.added"},
			repeat("response.function_call_arguments.delta", 2),
			[]string{"response.function_call_arguments.done", "response.output_item.done", "response.completed"})
		equal(t, "events", names(res.events), want)
		if d := deltas(t, res.events, "response.function_call_arguments.delta", "delta"); strings.Join(d, "") != args {
			t.Errorf("argument deltas %q", d)
		}
		items := deltas(t, res.events, "response.output_item.added", "item", "type")
		equal(t, "items", items, []string{"message", "function_call"})
		done := res.events[len(res.events)-1].json(t)
		fc := walk(done, "response", "output", 1)
		if str(fc, "type") != "function_call" || str(fc, "name") != "get_weather" || str(fc, "arguments") != args ||
			!strings.HasPrefix(str(fc, "call_id"), "call_") {
			t.Errorf("function_call item %v", fc)
		}
	})
	t.Run("anthropic", func(t *testing.T) {
		res := ts.call(req{api: APIAnthropic, stream: true})
		want := cat(
			[]string{"message_start", "ping", "content_block_start"},
			repeat("content_block_delta", 2),
			[]string{"content_block_stop", "content_block_start"},
			repeat("content_block_delta", 2),
			[]string{"content_block_stop", "message_delta", "message_stop"})
		equal(t, "events", names(res.events), want)
		tool := res.events[6].json(t)
		if str(tool, "content_block", "type") != "tool_use" || str(tool, "content_block", "name") != "get_weather" ||
			!strings.HasPrefix(str(tool, "content_block", "id"), "toolu_") || walk(tool, "index") != 1.0 {
			t.Errorf("tool block start %s", res.events[6].Data)
		}
		var partial []string
		for _, e := range res.events {
			m := e.json(t)
			if str(m, "delta", "type") == "input_json_delta" {
				partial = append(partial, str(m, "delta", "partial_json"))
			}
		}
		if strings.Join(partial, "") != args {
			t.Errorf("partial_json %q", partial)
		}
		if got := str(res.events[len(res.events)-2].json(t), "delta", "stop_reason"); got != "tool_use" {
			t.Errorf("stop_reason %q", got)
		}
	})
}

func TestRefusal(t *testing.T) {
	ts := startJSON(t, `{"default": {"refusal": "I can't help with that."}}`)
	t.Run("anthropic", func(t *testing.T) {
		res := ts.call(req{api: APIAnthropic, stream: true})
		equal(t, "events", names(res.events), anthropicText)
		if d := strings.Join(deltas(t, res.events, "content_block_delta", "delta", "text"), ""); d != "I can't help with that." {
			t.Errorf("text %q", d)
		}
		if got := str(res.events[len(res.events)-2].json(t), "delta", "stop_reason"); got != "refusal" {
			t.Errorf("stop_reason %q", got)
		}
	})
	t.Run("chat", func(t *testing.T) {
		res := ts.call(req{api: APIOpenAIChat, stream: true})
		text, finish := chatText(t, res.events)
		if text != "I can't help with that." || finish != "content_filter" {
			t.Errorf("text %q finish %q", text, finish)
		}
	})
	t.Run("responses", func(t *testing.T) {
		res := ts.call(req{api: APIOpenAIResponses, stream: true})
		n := names(res.events)
		if n[len(n)-1] != "response.incomplete" {
			t.Fatalf("events %q", n)
		}
		last := res.events[len(res.events)-1].json(t)
		if str(last, "response", "status") != "incomplete" || str(last, "response", "incomplete_details", "reason") != "content_filter" {
			t.Errorf("response.incomplete %s", res.events[len(res.events)-1].Data)
		}
	})
}

// TestRefusalWords: a refusal's error text and stop details go where each
// API has a place for them, streaming or not, and nowhere else: Chat sends
// both (stop_details on the finish choice, the error object beside it);
// Anthropic sends its refusal stop_details, category and explanation only;
// Responses sends neither.
func TestRefusalWords(t *testing.T) {
	const errText = "Refusal (cyber): Classifier declined this turn."
	details := map[string]string{"type": "refusal", "category": "cyber", "explanation": "Classifier declined this turn.", "policy": "p-7"}
	ts := start(t, &Scenario{Default: &Respond{Refusal: "I can't help with that.", StopError: errText, StopDetails: details}})
	all := map[string]any{}
	for k, v := range details {
		all[k] = v
	}
	anthropic := map[string]any{"type": "refusal", "category": details["category"], "explanation": details["explanation"]}

	// Chat's finish chunk comes before [DONE], Anthropic's message_delta
	// before message_stop.
	beforeLast := func(t *testing.T, res result) map[string]any { return res.events[len(res.events)-2].json(t) }
	whole := func(t *testing.T, res result) map[string]any { return decode(t, res.body) }
	finalResponse := func(t *testing.T, res result) map[string]any {
		return walk(res.events[len(res.events)-1].json(t), "response").(map[string]any)
	}
	for _, tc := range []struct {
		name        string
		api         string
		stream      bool
		final       func(*testing.T, result) map[string]any // the object that ends the answer
		detailsAt   []any                                   // where stop_details are, in it
		wantDetails map[string]any                          // nil: none sent
		wantError   string                                  // error.message beside them; "": none
	}{
		{"chat stream", APIOpenAIChat, true, beforeLast, []any{"choices", 0, "stop_details"}, all, errText},
		{"chat whole", APIOpenAIChat, false, whole, []any{"choices", 0, "stop_details"}, all, errText},
		{"anthropic stream", APIAnthropic, true, beforeLast, []any{"delta", "stop_details"}, anthropic, ""},
		{"anthropic whole", APIAnthropic, false, whole, []any{"stop_details"}, anthropic, ""},
		{"responses stream", APIOpenAIResponses, true, finalResponse, []any{"stop_details"}, nil, ""},
		{"responses whole", APIOpenAIResponses, false, whole, []any{"stop_details"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := ts.call(req{api: tc.api, stream: tc.stream})
			if res.status != 200 || res.readErr != nil {
				t.Fatalf("status %d, read error %v", res.status, res.readErr)
			}
			final := tc.final(t, res)
			got, _ := walk(final, tc.detailsAt...).(map[string]any)
			if !reflect.DeepEqual(got, tc.wantDetails) {
				t.Errorf("stop_details %v, want %v", got, tc.wantDetails)
			}
			if msg := str(final, "error", "message"); msg != tc.wantError {
				t.Errorf("error.message %q, want %q", msg, tc.wantError)
			}
			raw := string(res.body) + strings.Join(namesData(res.events), "\n")
			if tc.wantError == "" && strings.Contains(raw, errText) {
				t.Errorf("the error text was sent: %s", raw)
			}
		})
	}
}

// TestAnthropicStopDetails: the Messages API always sends stop_details:
// null when the stop has none, and a refusal's category or explanation the
// scenario leaves out is null.
func TestAnthropicStopDetails(t *testing.T) {
	ts := startJSON(t, `{"rules": [{"match": {"model": "refuse"}, "respond": {"refusal": "No.", "stop_details": {"explanation": "Declined."}}}],
		"default": {"text": "Hello."}}`)
	for _, tc := range []struct {
		model string
		want  any
	}{
		{"m", nil},
		{"refuse", map[string]any{"type": "refusal", "category": nil, "explanation": "Declined."}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			evs := ts.call(req{api: APIAnthropic, stream: true, model: tc.model}).events
			start, delta := evs[0].json(t)["message"].(map[string]any), evs[len(evs)-2].json(t)["delta"].(map[string]any)
			whole := decode(t, ts.call(req{api: APIAnthropic, model: tc.model}).body)
			for where, m := range map[string]map[string]any{"message_start": start, "message_delta": delta, "message": whole} {
				want := tc.want
				if where == "message_start" {
					want = nil // not known yet
				}
				got, sent := m["stop_details"]
				if !sent || !reflect.DeepEqual(got, want) {
					t.Errorf("%s: stop_details %v (sent: %t), want %v", where, got, sent, want)
				}
			}
		})
	}
}

func TestStopLength(t *testing.T) {
	ts := startJSON(t, `{"default": {"text": "truncated", "stop": "length"}}`)
	if _, finish := chatText(t, ts.call(req{api: APIOpenAIChat, stream: true}).events); finish != "length" {
		t.Errorf("chat finish %q", finish)
	}
	evs := ts.call(req{api: APIAnthropic, stream: true}).events
	if got := str(evs[len(evs)-2].json(t), "delta", "stop_reason"); got != "max_tokens" {
		t.Errorf("anthropic stop_reason %q", got)
	}
	evs = ts.call(req{api: APIOpenAIResponses, stream: true}).events
	if last := evs[len(evs)-1]; last.Event != "response.incomplete" || str(last.json(t), "response", "incomplete_details", "reason") != "max_output_tokens" {
		t.Errorf("responses last event %s %s", last.Event, last.Data)
	}
}

func TestThinking(t *testing.T) {
	ts := startJSON(t, `{"default": {"thinking": "Let me think about it.", "text": "Answer.", "chunks": 2}}`)
	t.Run("anthropic", func(t *testing.T) {
		res := ts.call(req{api: APIAnthropic, stream: true})
		want := cat(
			[]string{"message_start", "ping", "content_block_start"},
			repeat("content_block_delta", 3), // 2 thinking_delta + signature_delta
			[]string{"content_block_stop", "content_block_start"},
			repeat("content_block_delta", 2),
			[]string{"content_block_stop", "message_delta", "message_stop"})
		equal(t, "events", names(res.events), want)
		if got := str(res.events[2].json(t), "content_block", "type"); got != "thinking" {
			t.Errorf("first block %q", got)
		}
		types := deltas(t, res.events, "content_block_delta", "delta", "type")
		equal(t, "delta types", types, []string{"thinking_delta", "thinking_delta", "signature_delta", "text_delta", "text_delta"})
		thinking := deltas(t, res.events, "content_block_delta", "delta", "thinking")
		if strings.Join(thinking, "") != "Let me think about it." {
			t.Errorf("thinking %q", thinking)
		}
		if sig := str(res.events[5].json(t), "delta", "signature"); sig == "" {
			t.Errorf("empty signature")
		}
	})
	t.Run("responses", func(t *testing.T) {
		res := ts.call(req{api: APIOpenAIResponses, stream: true})
		d := deltas(t, res.events, "response.reasoning_summary_text.delta", "delta")
		if strings.Join(d, "") != "Let me think about it." || len(d) != 2 {
			t.Errorf("reasoning deltas %q", d)
		}
		equal(t, "items", deltas(t, res.events, "response.output_item.added", "item", "type"), []string{"reasoning", "message"})
		last := res.events[len(res.events)-1].json(t)
		if str(last, "response", "output", 0, "summary", 0, "text") != "Let me think about it." {
			t.Errorf("completed %s", res.events[len(res.events)-1].Data)
		}
	})
	t.Run("chat ignores thinking", func(t *testing.T) {
		res := ts.call(req{api: APIOpenAIChat, stream: true})
		text, finish := chatText(t, res.events)
		if text != "Answer." || finish != "stop" || strings.Contains(strings.Join(namesData(res.events), ""), "think") {
			t.Errorf("text %q finish %q", text, finish)
		}
	})
}

func namesData(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Data
	}
	return out
}

func TestNonStreaming(t *testing.T) {
	ts := startJSON(t, `{"default": {"text": "Full answer.", "tool_call": {"name": "f", "arguments": {"x": 1}}}}`)
	t.Run("chat", func(t *testing.T) {
		res := ts.call(req{api: APIOpenAIChat})
		m := decode(t, res.body)
		if res.status != 200 || str(m, "object") != "chat.completion" ||
			str(m, "choices", 0, "message", "content") != "Full answer." ||
			str(m, "choices", 0, "message", "tool_calls", 0, "function", "name") != "f" ||
			str(m, "choices", 0, "message", "tool_calls", 0, "function", "arguments") != `{"x":1}` ||
			str(m, "choices", 0, "finish_reason") != "tool_calls" {
			t.Errorf("%d %s", res.status, res.body)
		}
	})
	t.Run("responses", func(t *testing.T) {
		res := ts.call(req{api: APIOpenAIResponses})
		m := decode(t, res.body)
		if res.status != 200 || str(m, "object") != "response" || str(m, "status") != "completed" ||
			str(m, "output", 0, "content", 0, "text") != "Full answer." || str(m, "output", 1, "name") != "f" {
			t.Errorf("%d %s", res.status, res.body)
		}
		// The id is remembered for previous_response_id.
		next := ts.call(req{api: APIOpenAIResponses, prev: str(m, "id")})
		if next.status != 200 {
			t.Errorf("follow-up: %d %s", next.status, next.body)
		}
	})
	t.Run("anthropic", func(t *testing.T) {
		res := ts.call(req{api: APIAnthropic})
		m := decode(t, res.body)
		input, _ := json.Marshal(walk(m, "content", 1, "input"))
		if res.status != 200 || str(m, "type") != "message" || str(m, "content", 0, "text") != "Full answer." ||
			str(m, "content", 1, "type") != "tool_use" || string(input) != `{"x":1}` || str(m, "stop_reason") != "tool_use" {
			t.Errorf("%d %s", res.status, res.body)
		}
	})
}

func TestDefaultContentInherited(t *testing.T) {
	// A rule with only pacing fields streams the default's content; with no
	// default content at all, DefaultText.
	ts := startJSON(t, `{"rules": [{"match": {"model": "x"}, "respond": {"chunks": 1}}],
		"default": {"text": "from the default"}}`)
	if text, _ := chatText(t, ts.call(req{api: APIOpenAIChat, stream: true, model: "x"}).events); text != "from the default" {
		t.Errorf("text %q", text)
	}
	ts2 := start(t, nil)
	if text, _ := chatText(t, ts2.call(req{api: APIOpenAIChat, stream: true}).events); text != DefaultText {
		t.Errorf("nil scenario text %q", text)
	}
}
