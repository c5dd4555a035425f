package openai_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/openai"
	"github.com/musepi/musepi/provider/providertest"
)

// The fuzz targets here hand the provider an arbitrary response body, with
// no network: the HTTP client's transport answers every request itself.
// Whatever the body, Stream must return promptly, never panic (the provider
// turns its own panics into "internal error" messages, which count as
// panics here), never return nil, and return a well-formed message.

const fuzzModel = "gpt-fuzz"

func fuzzRequest() provider.Request {
	return provider.Request{
		SessionID:  "s1",
		Model:      fuzzModel,
		Credential: "main",
		APIKey:     "sk-fuzz",
		Context: []*messages.Entry{
			{Seq: 1, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: "hi"}}},
		},
		Tools: []provider.ToolSpec{{Name: "get_weather", Description: "Weather",
			SchemaJSON: `{"type":"object","properties":{"city":{"type":"string"}}}`}},
	}
}

// runFuzzStream runs one Stream call of the given API against tr and checks
// the invariants every outcome must meet.
func runFuzzStream(t *testing.T, api string, tr *providertest.CannedTransport) *messages.AssistantMessage {
	t.Helper()
	p := openai.New(openai.Config{
		BaseURL:    "http://fuzz.invalid/v1",
		API:        api,
		HTTPClient: &http.Client{Transport: tr},
	})
	path := "/v1/chat/completions"
	if api == openai.APIResponses {
		path = "/v1/responses"
	}
	m := providertest.Stream(t, p, fuzzRequest(), tr, openai.ProviderName, path)
	if m.GetStopReason() == messages.StopReason_STOP_REASON_TOOL_USE && !hasToolCall(m) {
		t.Errorf("TOOL_USE without a tool call: %v", m.GetContent())
	}
	return m
}

func hasToolCall(m *messages.AssistantMessage) bool {
	for _, c := range m.GetContent() {
		if c.GetToolCall() != nil {
			return true
		}
	}
	return false
}

// fuzzStatus maps any int to an HTTP status code in 100-599, keeping those
// already in range.
func fuzzStatus(n int) int {
	if n >= 100 && n <= 599 {
		return n
	}
	s := n % 500
	if s < 0 {
		s += 500
	}
	return 100 + s
}

// checkHTTPError checks what an HTTP error status must give.
func checkHTTPError(t *testing.T, m *messages.AssistantMessage, status int) {
	t.Helper()
	if status < 400 {
		return
	}
	if m.GetStopReason() != messages.StopReason_STOP_REASON_ERROR {
		t.Fatalf("HTTP %d gave stop reason %v", status, m.GetStopReason())
	}
	if int(m.GetHttpStatus()) != status {
		t.Errorf("HTTP %d kept as status %d", status, m.GetHttpStatus())
	}
	if m.GetHeaders()["x-request-id"] != "req_fuzz" {
		t.Errorf("HTTP %d headers %v", status, m.GetHeaders())
	}
	if !strings.HasPrefix(m.GetErrorMessage(), fmt.Sprint(status)) {
		t.Errorf("HTTP %d error text %q", status, m.GetErrorMessage())
	}
}

// Wire examples for the seeds (the shapes of chat_test.go and
// responses_test.go).

func sseData(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("data: " + e + "\n\n")
	}
	return b.String()
}

func chatChunk(delta map[string]any, finish string) string {
	choice := map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": nil}
	if finish != "" {
		choice["finish_reason"] = finish
	}
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
		"model": "gpt-test", "choices": []any{choice},
	})
	return string(b)
}

func chatText(s string) string { return chatChunk(map[string]any{"content": s}, "") }

func chatToolDelta(index int, id, name, args string) string {
	tc := map[string]any{"index": index, "function": map[string]any{"arguments": args}}
	if id != "" {
		tc["id"], tc["type"] = id, "function"
		tc["function"].(map[string]any)["name"] = name
	}
	return chatChunk(map[string]any{"tool_calls": []any{tc}}, "")
}

func chatSeeds() []string {
	text := sseData(
		chatChunk(map[string]any{"role": "assistant", "content": ""}, ""),
		chatText("Hello"), chatText(", world"),
		chatChunk(map[string]any{}, "stop"), "[DONE]")
	tool := sseData(
		chatChunk(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
			map[string]any{"index": 0, "id": "call_abc", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": ""}},
		}}, ""),
		chatToolDelta(0, "", "", `{"city":`), chatToolDelta(0, "", "", `"Paris"}`),
		chatToolDelta(1, "call_def", "get_time", "{}"),
		chatChunk(map[string]any{}, "tool_calls"), "[DONE]")
	return []string{
		text,
		tool,
		sseData(chatText("partial answer"), chatChunk(map[string]any{}, "length"), "[DONE]"),
		sseData(chatText("partial answer"), chatChunk(map[string]any{}, "content_filter"), "[DONE]"),
		sseData(chatChunk(map[string]any{"refusal": "I can't help with that."}, ""), chatChunk(map[string]any{}, "stop"), "[DONE]"),
		// Every call at index 0, told apart by id.
		sseData(chatToolDelta(0, "call_1", "a", "{}"), chatToolDelta(0, "call_2", "b", "{}"), chatChunk(map[string]any{}, "tool_calls")),
		// A finish reason then a usage chunk, no [DONE].
		sseData(chatText("done"), chatChunk(map[string]any{}, "stop"), `{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`),
		// In-stream errors.
		sseData(`{"error":{"message":"The server is overloaded","type":"server_error","code":"server_error","param":null}}`),
		sseData(chatText("some"), `{"error":{"message":"The server is overloaded","type":"server_error","code":"server_error","param":null}}`),
		sseData(`{"error":"upstream exploded"}`),
		sseData(`{"error":null}`),
		sseData(`{"error":{}}`),
		// Truncated.
		text[:len(text)/2],
		tool[:len(tool)-30],
		sseData(chatText("half")),
		sseData(chatChunk(map[string]any{"role": "assistant", "content": ""}, "")),
		"data: " + chatText("no blank line at the end"),
		// Odd but well-framed.
		": comment\n\nevent: whatever\ndata: " + chatText("a") + "\n\ndata:" + chatText("b") + "\n\n" + sseData(chatChunk(map[string]any{}, "stop")),
		strings.ReplaceAll(text, "\n", "\r\n"),
		sseData(`{"choices":[{"index":1,"delta":{"content":"other choice"},"finish_reason":"stop"}]}`, "[DONE]"),
		sseData(`{"choices":[{"index":"zero","delta":{"content":5,"tool_calls":"no"},"finish_reason":7}]}`, `{"choices":null}`, `[]`, `null`),
		sseData(`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`, "[DONE]"),
		sseData(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":-1,"id":"x","function":{"name":"f","arguments":"{"}}]},"finish_reason":"weird"}]}`),
		sseData("[DONE]"),
		"data: [DONE]garbage\n\n",
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"split\ndata: over lines\"}}]}\n\n",
		// Garbage.
		"",
		"\n\n\n",
		sseData("{not json"),
		"{\"id\":\"x\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}",
		"<html><body>bad gateway</body></html>",
		"data: \xff\xfe\x00\n\n",
	}
}

func respEvent(v map[string]any) string {
	b, _ := json.Marshal(v)
	return fmt.Sprintf("event: %s\ndata: %s\n\n", v["type"], b)
}

func respObj(id, status string, output []any) map[string]any {
	return map[string]any{
		"id": id, "object": "response", "created_at": 1700000000, "status": status, "model": "gpt-test",
		"output": output, "error": nil, "incomplete_details": nil, "parallel_tool_calls": true,
		"tool_choice": "auto", "tools": []any{}, "temperature": 1, "top_p": 1,
	}
}

func respMessageItem(id, text string) map[string]any {
	return map[string]any{"type": "message", "id": id, "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}
}

func respCallItem(id, callID, name, args string) map[string]any {
	return map[string]any{"type": "function_call", "id": id, "call_id": callID, "name": name, "arguments": args, "status": "completed"}
}

func respEvents(evs ...map[string]any) string {
	var b strings.Builder
	for i, e := range evs {
		e["sequence_number"] = i
		b.WriteString(respEvent(e))
	}
	return b.String()
}

func responsesSeeds() []string {
	created := map[string]any{"type": "response.created", "response": respObj("resp_1", "in_progress", []any{})}
	text := func() string {
		return respEvents(
			map[string]any{"type": "response.created", "response": respObj("resp_1", "in_progress", []any{})},
			map[string]any{"type": "response.in_progress", "response": respObj("resp_1", "in_progress", []any{})},
			map[string]any{"type": "response.output_item.added", "output_index": 0,
				"item": map[string]any{"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []any{}}},
			map[string]any{"type": "response.content_part.added", "item_id": "msg_1", "output_index": 0, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}},
			map[string]any{"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Hi", "logprobs": []any{}},
			map[string]any{"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": " there", "logprobs": []any{}},
			map[string]any{"type": "response.output_text.done", "item_id": "msg_1", "output_index": 0, "content_index": 0, "text": "Hi there", "logprobs": []any{}},
			map[string]any{"type": "response.output_item.done", "output_index": 0, "item": respMessageItem("msg_1", "Hi there")},
			map[string]any{"type": "response.completed", "response": respObj("resp_1", "completed", []any{respMessageItem("msg_1", "Hi there")})},
		)
	}()
	tool := respEvents(
		map[string]any{"type": "response.created", "response": respObj("resp_1", "in_progress", []any{})},
		map[string]any{"type": "response.output_item.added", "output_index": 0,
			"item": map[string]any{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "", "status": "in_progress"}},
		map[string]any{"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": `{"city":`},
		map[string]any{"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0, "delta": `"Paris"}`},
		map[string]any{"type": "response.function_call_arguments.done", "item_id": "fc_1", "output_index": 0, "arguments": `{"city":"Paris"}`},
		map[string]any{"type": "response.output_item.done", "output_index": 0, "item": respCallItem("fc_1", "call_1", "get_weather", `{"city":"Paris"}`)},
		map[string]any{"type": "response.completed", "response": respObj("resp_1", "completed", []any{respCallItem("fc_1", "call_1", "get_weather", `{"city":"Paris"}`)})},
	)
	incomplete := func(reason string) map[string]any {
		r := respObj("resp_x", "incomplete", []any{respMessageItem("msg_1", "trunc")})
		r["incomplete_details"] = map[string]any{"reason": reason}
		return map[string]any{"type": "response.incomplete", "response": r}
	}
	failed := respObj("resp_x", "failed", []any{})
	failed["error"] = map[string]any{"code": "server_error", "message": "The model failed to generate a response."}
	clone := func(m map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	delta := `{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Once"}`
	return []string{
		text,
		tool,
		respEvents(clone(created), incomplete("max_output_tokens")),
		respEvents(clone(created), incomplete("content_filter")),
		respEvents(clone(created), incomplete("")),
		respEvents(clone(created), map[string]any{"type": "response.failed", "response": failed}),
		respEvents(clone(created), map[string]any{"type": "response.failed", "response": respObj("resp_x", "failed", []any{})}),
		respEvents(clone(created), map[string]any{"type": "error", "code": "rate_limit_exceeded", "message": "Rate limit reached for requests", "param": nil}),
		respEvents(clone(created), map[string]any{"type": "error"}),
		respEvents(clone(created)),
		// Refusal, and text by output index with no item id.
		respEvents(map[string]any{"type": "response.refusal.delta", "output_index": 0, "delta": "no"},
			map[string]any{"type": "response.output_text.delta", "output_index": 3, "delta": "x"},
			map[string]any{"type": "response.completed", "response": respObj("resp_1", "completed", []any{})}),
		// Arguments that arrive only with the .done events.
		respEvents(map[string]any{"type": "response.function_call_arguments.done", "item_id": "fc_9", "output_index": 2, "arguments": "{}"},
			map[string]any{"type": "response.output_item.done", "output_index": 2, "item": respCallItem("fc_9", "call_9", "f", "")},
			map[string]any{"type": "response.completed", "response": respObj("", "completed", nil)}),
		// Truncated.
		text[:len(text)/2],
		tool[:len(tool)-40],
		sseData(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","output":[]}}`, delta),
		// Odd but well-framed.
		sseData(`{"type":"response.completed","response":{"id":"r","output":[{"type":"message","content":[{"type":"refusal","refusal":"no"}]},{"type":"function_call","arguments":{"not":"a string"}},{"type":"reasoning"}]}}`),
		sseData(`{"type":"response.incomplete","response":{"incomplete_details":null}}`),
		sseData(`{"type":"response.failed","response":{"error":{"code":5,"message":null}}}`),
		sseData(`{"type":"response.output_item.added","output_index":-1,"item":{"type":"function_call"}}`, `{"type":"response.output_item.done","item":{"type":"message"}}`, `{"type":7}`),
		sseData(`{"type":"response.created","response":{"id":"resp_1","error":"upstream"}}`),
		sseData("[DONE]"),
		// Garbage.
		"",
		"event: response.completed\ndata: {not json\n\n",
		"<html><body>bad gateway</body></html>",
		"data: \xff\xfe\x00\n\n",
	}
}

// FuzzChatStream gives the Chat Completions stream an arbitrary body with
// status 200 and Content-Type text/event-stream.
func FuzzChatStream(f *testing.F) {
	for _, s := range chatSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		tr := &providertest.CannedTransport{Status: http.StatusOK, ContentType: "text/event-stream", Body: body, RequestIDHeader: "X-Request-Id"}
		m := runFuzzStream(t, openai.APIChat, tr)
		if r := m.GetStopReason(); r != messages.StopReason_STOP_REASON_ERROR && m.GetHttpStatus() != http.StatusOK {
			t.Errorf("%v with status %d", r, m.GetHttpStatus())
		}
	})
}

// FuzzResponsesStream gives the Responses API stream an arbitrary body with
// status 200 and Content-Type text/event-stream.
func FuzzResponsesStream(f *testing.F) {
	for _, s := range responsesSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		tr := &providertest.CannedTransport{Status: http.StatusOK, ContentType: "text/event-stream", Body: body, RequestIDHeader: "X-Request-Id"}
		m := runFuzzStream(t, openai.APIResponses, tr)
		if r := m.GetStopReason(); r != messages.StopReason_STOP_REASON_ERROR && m.GetHttpStatus() != http.StatusOK {
			t.Errorf("%v with status %d", r, m.GetHttpStatus())
		}
	})
}

// statusSeeds are error bodies and a few stream bodies for the status
// targets.
func statusSeeds(f *testing.F, streams []string) {
	for _, s := range []struct {
		status int
		ct     uint8
		body   string
	}{
		{429, 1, `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`},
		{429, 1, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`},
		{400, 1, `{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`},
		{400, 1, `{"error":{"message":"Previous response with id 'resp_1' not found.","type":"invalid_request_error","code":"previous_response_not_found"}}`},
		{401, 1, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`},
		{500, 1, `{"error":"upstream exploded"}`},
		{429, 1, `{"message":"slow down","code":429}`},
		{403, 1, `{"error":{"code":"forbidden"}}`},
		{503, 1, `{"error":{"message":5,"code":{"x":1},"type":null}}`},
		{502, 2, "<html><body>bad gateway</body></html>"},
		{503, 3, " "},
		{504, 5, ""},
		{599, 1, "{not json"},
		{404, 1, "[]"},
		{200, 1, `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`},
		{204, 3, ""},
		{301, 5, "moved"},
		{304, 0, ""},
		{101, 0, ""},
		{100, 4, "data: [DONE]\n\n"},
		{207, 0, streams[0]},
		{500, 0, streams[0]},
		{200, 4, streams[1]},
		{200, 2, streams[0]},
	} {
		f.Add(s.status, s.ct, s.body)
	}
}

func fuzzStatusTarget(t *testing.T, api string, status int, ct uint8, body string) {
	status = fuzzStatus(status)
	tr := &providertest.CannedTransport{Status: status, ContentType: providertest.ContentTypes[int(ct)%len(providertest.ContentTypes)], Body: body, RequestIDHeader: "X-Request-Id"}
	m := runFuzzStream(t, api, tr)
	checkHTTPError(t, m, status)
}

// FuzzChatStreamStatus is FuzzChatStream with any status (100-599) and a
// choice of Content-Type: the error path.
func FuzzChatStreamStatus(f *testing.F) {
	statusSeeds(f, chatSeeds())
	f.Fuzz(func(t *testing.T, status int, ct uint8, body string) {
		fuzzStatusTarget(t, openai.APIChat, status, ct, body)
	})
}

// FuzzResponsesStreamStatus is FuzzResponsesStream with any status
// (100-599) and a choice of Content-Type: the error path.
func FuzzResponsesStreamStatus(f *testing.F) {
	statusSeeds(f, responsesSeeds())
	f.Fuzz(func(t *testing.T, status int, ct uint8, body string) {
		fuzzStatusTarget(t, openai.APIResponses, status, ct, body)
	})
}
