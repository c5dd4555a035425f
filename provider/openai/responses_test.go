package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// responseObj is a Responses API response object.
func responseObj(id, status string, output []any) map[string]any {
	return map[string]any{
		"id": id, "object": "response", "created_at": 1700000000, "status": status, "model": "gpt-test",
		"output": output, "error": nil, "incomplete_details": nil, "parallel_tool_calls": true,
		"tool_choice": "auto", "tools": []any{}, "temperature": 1, "top_p": 1,
	}
}

func messageItem(id, text string) map[string]any {
	return map[string]any{"type": "message", "id": id, "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}
}

func callItem(id, callID, name, args string) map[string]any {
	return map[string]any{"type": "function_call", "id": id, "call_id": callID, "name": name, "arguments": args, "status": "completed"}
}

// streamText sends a whole text response in the Responses wire format.
func streamText(w http.ResponseWriter, id string, pieces ...string) {
	sseHeaders(w)
	seq := 0
	ev := func(v map[string]any) {
		v["sequence_number"] = seq
		seq++
		sendEvent(w, v)
	}
	ev(map[string]any{"type": "response.created", "response": responseObj(id, "in_progress", []any{})})
	ev(map[string]any{"type": "response.in_progress", "response": responseObj(id, "in_progress", []any{})})
	ev(map[string]any{"type": "response.output_item.added", "output_index": 0,
		"item": map[string]any{"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []any{}}})
	ev(map[string]any{"type": "response.content_part.added", "item_id": "msg_1", "output_index": 0, "content_index": 0,
		"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
	full := ""
	for _, p := range pieces {
		full += p
		ev(map[string]any{"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": p, "logprobs": []any{}})
	}
	ev(map[string]any{"type": "response.output_text.done", "item_id": "msg_1", "output_index": 0, "content_index": 0, "text": full, "logprobs": []any{}})
	ev(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": messageItem("msg_1", full)})
	ev(map[string]any{"type": "response.completed", "response": responseObj(id, "completed", []any{messageItem("msg_1", full)})})
}

func inputOf(t *testing.T, body map[string]any) string {
	t.Helper()
	b, err := json.Marshal(body["input"])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestResponsesTextAndChaining(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		n := s.hitCount()
		streamText(w, fmt.Sprintf("resp_%d", n), "Hi", " there")
	})
	p := newProvider(t, srv.URL+"/v1", "responses", 0)

	// Call 1: the whole context, no previous_response_id.
	ctx := []*messages.Entry{user(1, "hello")}
	var rec recorder
	m1 := p.Stream(bg(), request(ctx...), rec.on)
	wantStop(t, m1, messages.StopReason_STOP_REASON_STOP)
	if textOf(m1) != "Hi there" || rec.text("text") != "Hi there" || rec.count("text") != 2 || m1.GetHttpStatus() != 200 {
		t.Errorf("text %q deltas %q status %d", textOf(m1), rec.text("text"), m1.GetHttpStatus())
	}
	b := srv.body(t, 0)
	srv.mu.Lock()
	path := srv.paths[0]
	srv.mu.Unlock()
	if path != "/v1/responses" || b["stream"] != true || b["model"] != "gpt-test" {
		t.Errorf("path %q body %v", path, b)
	}
	if _, ok := b["previous_response_id"]; ok {
		t.Errorf("first call sent previous_response_id %v", b["previous_response_id"])
	}
	if got := inputOf(t, b); got != `[{"content":"hello","role":"user"}]` {
		t.Errorf("input %s", got)
	}

	// Call 2: only the new entries, chained to resp_1.
	ctx = append(ctx, assistant(2, m1), modelChange(3), user(4, "more"))
	m2 := p.Stream(bg(), request(ctx...), nil)
	wantStop(t, m2, messages.StopReason_STOP_REASON_STOP)
	b = srv.body(t, 1)
	if b["previous_response_id"] != "resp_1" {
		t.Errorf("previous_response_id %v", b["previous_response_id"])
	}
	if got := inputOf(t, b); got != `[{"content":"more","role":"user"}]` {
		t.Errorf("input %s", got)
	}

	// Call 3: chained to resp_2.
	ctx = append(ctx, assistant(5, m2), user(6, "again"))
	wantStop(t, p.Stream(bg(), request(ctx...), nil), messages.StopReason_STOP_REASON_STOP)
	b = srv.body(t, 2)
	if b["previous_response_id"] != "resp_2" || inputOf(t, b) != `[{"content":"again","role":"user"}]` {
		t.Errorf("call 3: previous %v input %s", b["previous_response_id"], inputOf(t, b))
	}

	// After ResetSession: the whole context, no previous_response_id.
	p.ResetSession("s1")
	ctx = append(ctx, assistant(7, provider.Text("x")), user(8, "last"))
	wantStop(t, p.Stream(bg(), request(ctx...), nil), messages.StopReason_STOP_REASON_STOP)
	b = srv.body(t, 3)
	if _, ok := b["previous_response_id"]; ok {
		t.Errorf("previous_response_id after reset: %v", b["previous_response_id"])
	}
	want := `[{"content":"hello","role":"user"},{"content":"Hi there","role":"assistant"},{"content":"more","role":"user"},` +
		`{"content":"Hi there","role":"assistant"},{"content":"again","role":"user"},{"content":"x","role":"assistant"},{"content":"last","role":"user"}]`
	if got := inputOf(t, b); got != want {
		t.Errorf("input after reset\n got %s\nwant %s", got, want)
	}

	// Another session is not chained to this one.
	other := request(user(1, "hello"), assistant(2, m1), user(3, "more"))
	other.SessionID = "s2"
	wantStop(t, p.Stream(bg(), other, nil), messages.StopReason_STOP_REASON_STOP)
	if _, ok := srv.body(t, 4)["previous_response_id"]; ok {
		t.Error("session s2 chained to s1's response")
	}
}

func TestResponsesChainNeedsSamePrefix(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		streamText(w, fmt.Sprintf("resp_%d", s.hitCount()), "ok")
	})
	p := newProvider(t, srv.URL, "responses", 0)
	ctx := []*messages.Entry{user(1, "a"), user(2, "b")}
	m := p.Stream(bg(), request(ctx...), nil)
	wantStop(t, m, messages.StopReason_STOP_REASON_STOP)

	// The context was rewritten (compaction): no chaining.
	compacted := []*messages.Entry{user(9, "summary"), assistant(10, m), user(11, "c")}
	wantStop(t, p.Stream(bg(), request(compacted...), nil), messages.StopReason_STOP_REASON_STOP)
	b := srv.body(t, 1)
	if _, ok := b["previous_response_id"]; ok {
		t.Errorf("chained across a rewritten context: %v", b["previous_response_id"])
	}

	// Another model: no chaining either.
	next := append(compacted, assistant(12, m), user(13, "d"))
	req := request(next...)
	req.Model = "other-model"
	msg := p.Stream(bg(), req, nil)
	if msg.GetStopReason() != messages.StopReason_STOP_REASON_STOP {
		t.Fatalf("stop %v", msg.GetStopReason())
	}
	if _, ok := srv.body(t, 2)["previous_response_id"]; ok {
		t.Error("chained across a model change")
	}

	// Nothing new after the covered prefix: the whole context again.
	req = request(next...)
	req.Model = "other-model"
	p.Stream(bg(), req, nil)
	if _, ok := srv.body(t, 3)["previous_response_id"]; ok {
		t.Error("chained with no new input")
	}
}

func TestResponsesToolCall(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		if s.hitCount() > 1 {
			streamText(w, "resp_2", "It is sunny.")
			return
		}
		sseHeaders(w)
		sendEvent(w, map[string]any{"type": "response.created", "sequence_number": 0, "response": responseObj("resp_1", "in_progress", []any{})})
		sendEvent(w, map[string]any{"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
			"item": map[string]any{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "", "status": "in_progress"}})
		sendEvent(w, map[string]any{"type": "response.function_call_arguments.delta", "sequence_number": 2, "item_id": "fc_1", "output_index": 0, "delta": `{"city":`})
		sendEvent(w, map[string]any{"type": "response.function_call_arguments.delta", "sequence_number": 3, "item_id": "fc_1", "output_index": 0, "delta": `"Paris"}`})
		sendEvent(w, map[string]any{"type": "response.function_call_arguments.done", "sequence_number": 4, "item_id": "fc_1", "output_index": 0, "arguments": `{"city":"Paris"}`})
		sendEvent(w, map[string]any{"type": "response.output_item.done", "sequence_number": 5, "output_index": 0, "item": callItem("fc_1", "call_1", "get_weather", `{"city":"Paris"}`)})
		sendEvent(w, map[string]any{"type": "response.completed", "sequence_number": 6,
			"response": responseObj("resp_1", "completed", []any{callItem("fc_1", "call_1", "get_weather", `{"city":"Paris"}`)})})
	})
	p := newProvider(t, srv.URL, "responses", 0)
	req := request(user(1, "weather in Paris?"))
	req.Tools = []provider.ToolSpec{{Name: "get_weather", Description: "Weather", SchemaJSON: `{"type":"object","properties":{"city":{"type":"string"}}}`}}
	var rec recorder
	m := p.Stream(bg(), req, rec.on)
	wantStop(t, m, messages.StopReason_STOP_REASON_TOOL_USE)
	calls := callsOf(m)
	if len(calls) != 1 || calls[0].GetId() != "call_1" || calls[0].GetName() != "get_weather" || calls[0].GetArgumentsJson() != `{"city":"Paris"}` {
		t.Fatalf("calls %v", calls)
	}
	if rec.text("tool_call") != `{"city":"Paris"}` {
		t.Errorf("tool deltas %q", rec.text("tool_call"))
	}
	tools, _ := json.Marshal(srv.body(t, 0)["tools"])
	if want := `[{"description":"Weather","name":"get_weather","parameters":{"properties":{"city":{"type":"string"}},"type":"object"},"strict":false,"type":"function"}]`; string(tools) != want {
		t.Errorf("tools\n got %s\nwant %s", tools, want)
	}

	// The tool result goes alone, chained to resp_1.
	req.Context = append(req.Context, assistant(2, m), toolResult(3, "call_1", "get_weather", "sunny"))
	m2 := p.Stream(bg(), req, nil)
	wantStop(t, m2, messages.StopReason_STOP_REASON_STOP)
	b := srv.body(t, 1)
	if b["previous_response_id"] != "resp_1" || inputOf(t, b) != `[{"call_id":"call_1","output":"sunny","type":"function_call_output"}]` {
		t.Errorf("previous %v input %s", b["previous_response_id"], inputOf(t, b))
	}

	// Without the chain, the call and its result are replayed as items.
	p.ResetSession("s1")
	p.Stream(bg(), req, nil)
	want := `[{"content":"weather in Paris?","role":"user"},{"arguments":"{\"city\":\"Paris\"}","call_id":"call_1","name":"get_weather","type":"function_call"},` +
		`{"call_id":"call_1","output":"sunny","type":"function_call_output"}]`
	if got := inputOf(t, srv.body(t, 2)); got != want {
		t.Errorf("replayed input\n got %s\nwant %s", got, want)
	}
}

func TestResponsesStaleReplay(t *testing.T) {
	for _, stale := range []string{
		"Previous response with id 'resp_1' not found.",
		"Item with id 'rs_abc' not found. Items are not persisted when `store` is set to false.",
	} {
		t.Run(stale, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
				switch s.hitCount() {
				case 2:
					jsonError(w, 400, stale, "invalid_request_error", "previous_response_not_found")
				default:
					streamText(w, fmt.Sprintf("resp_%d", s.hitCount()), "ok")
				}
			})
			p := newProvider(t, srv.URL, "responses", 0)
			ctx := []*messages.Entry{user(1, "a")}
			m1 := p.Stream(bg(), request(ctx...), nil)
			wantStop(t, m1, messages.StopReason_STOP_REASON_STOP)

			ctx = append(ctx, assistant(2, m1), user(3, "b"))
			m := p.Stream(bg(), request(ctx...), nil)
			wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
			if m.GetHttpStatus() != 400 {
				t.Errorf("status %d", m.GetHttpStatus())
			}
			wantContains(t, m.GetErrorMessage(), "400 Bad Request: "+stale, "(code: previous_response_not_found")
			wantClass(t, m, retry.StaleReplay)
			if srv.body(t, 1)["previous_response_id"] != "resp_1" {
				t.Errorf("second call not chained: %v", srv.body(t, 1)["previous_response_id"])
			}

			// The policy resets the session and retries: the whole context.
			p.ResetSession("s1")
			m3 := p.Stream(bg(), request(ctx...), nil)
			wantStop(t, m3, messages.StopReason_STOP_REASON_STOP)
			b := srv.body(t, 2)
			if _, ok := b["previous_response_id"]; ok {
				t.Errorf("retry after reset still chained: %v", b["previous_response_id"])
			}
			if got := inputOf(t, b); got != `[{"content":"a","role":"user"},{"content":"ok","role":"assistant"},{"content":"b","role":"user"}]` {
				t.Errorf("input %s", got)
			}
		})
	}
}

func TestResponsesFailureKeepsChain(t *testing.T) {
	// A failed call leaves the chain as it was: the retry sends the same delta.
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		if s.hitCount() == 2 {
			jsonError(w, 500, "The server had an error", "server_error", "")
			return
		}
		streamText(w, fmt.Sprintf("resp_%d", s.hitCount()), "ok")
	})
	p := newProvider(t, srv.URL, "responses", 0)
	ctx := []*messages.Entry{user(1, "a")}
	m1 := p.Stream(bg(), request(ctx...), nil)
	ctx = append(ctx, assistant(2, m1), user(3, "b"))
	failed := p.Stream(bg(), request(ctx...), nil)
	wantStop(t, failed, messages.StopReason_STOP_REASON_ERROR)
	wantClass(t, failed, retry.Transient)
	wantStop(t, p.Stream(bg(), request(ctx...), nil), messages.StopReason_STOP_REASON_STOP)
	for i := 1; i <= 2; i++ {
		b := srv.body(t, i)
		if b["previous_response_id"] != "resp_1" || inputOf(t, b) != `[{"content":"b","role":"user"}]` {
			t.Errorf("call %d: previous %v input %s", i, b["previous_response_id"], inputOf(t, b))
		}
	}
}

func TestResponsesTerminalEvents(t *testing.T) {
	incomplete := func(reason string) map[string]any {
		r := responseObj("resp_x", "incomplete", []any{messageItem("msg_1", "trunc")})
		r["incomplete_details"] = map[string]any{"reason": reason}
		return map[string]any{"type": "response.incomplete", "response": r}
	}
	failed := responseObj("resp_x", "failed", []any{})
	failed["error"] = map[string]any{"code": "server_error", "message": "The model failed to generate a response."}
	// A failure with a policy code (openai-go's ResponseErrorCode) is an
	// error of the response, not one of the API's refusals (those are
	// incomplete for content_filter): it keeps its words and code.
	policy := responseObj("resp_x", "failed", []any{})
	policy["error"] = map[string]any{"code": "bio_policy", "message": "This request was blocked by a biology policy."}
	for _, tc := range []struct {
		name     string
		events   []map[string]any
		stop     messages.StopReason
		detail   string
		contains string
		class    retry.Class
	}{
		{name: "max tokens", events: []map[string]any{incomplete("max_output_tokens")}, stop: messages.StopReason_STOP_REASON_LENGTH, class: retry.Success},
		{name: "content filter", events: []map[string]any{incomplete("content_filter")}, stop: messages.StopReason_STOP_REASON_ERROR,
			detail: "sensitive", contains: "The response was stopped by the provider's content filter (incomplete_details.reason: content_filter)",
			class: retry.ClassifierRefusal},
		{name: "failed", events: []map[string]any{{"type": "response.failed", "response": failed}}, stop: messages.StopReason_STOP_REASON_ERROR,
			contains: "The model failed to generate a response. (code: server_error)", class: retry.Transient},
		{name: "policy failure", events: []map[string]any{{"type": "response.failed", "response": policy}}, stop: messages.StopReason_STOP_REASON_ERROR,
			contains: "This request was blocked by a biology policy. (code: bio_policy)", class: retry.NotRetryable},
		{name: "error event", events: []map[string]any{{"type": "error", "code": "rate_limit_exceeded", "message": "Rate limit reached for requests", "param": nil}},
			stop: messages.StopReason_STOP_REASON_ERROR, contains: "Rate limit reached for requests (code: rate_limit_exceeded)", class: retry.Transient},
		{name: "stale error event", events: []map[string]any{{"type": "error", "code": "previous_response_not_found", "message": "Previous response with id 'resp_0' not found.", "param": "previous_response_id"}},
			stop: messages.StopReason_STOP_REASON_ERROR, contains: "Previous response with id 'resp_0' not found.", class: retry.StaleReplay},
		{name: "no terminal event", events: nil, stop: messages.StopReason_STOP_REASON_ERROR, contains: "connection closed before the stream completed", class: retry.Transient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
				sseHeaders(w)
				sendEvent(w, map[string]any{"type": "response.created", "sequence_number": 0, "response": responseObj("resp_x", "in_progress", []any{})})
				for i, e := range tc.events {
					e["sequence_number"] = i + 1
					sendEvent(w, e)
				}
			})
			p := newProvider(t, srv.URL, "responses", 0)
			m := p.Stream(bg(), request(user(1, "hi")), nil)
			wantStop(t, m, tc.stop)
			if m.GetStopDetails().GetType() != tc.detail {
				t.Errorf("stop details %v", m.GetStopDetails())
			}
			if tc.contains != "" {
				wantContains(t, m.GetErrorMessage(), tc.contains)
			}
			wantClass(t, m, tc.class)
			// Only a completed response is chained.
			p.mu.Lock()
			_, chained := p.sessions["s1"]
			p.mu.Unlock()
			if chained {
				t.Error("a response that did not complete was remembered")
			}
		})
	}
}

func TestResponsesStreamCut(t *testing.T) {
	delta := `{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Once"}`
	created := `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","output":[]}}`
	for _, tc := range []struct {
		name   string
		events []string
		class  retry.Class
		detail string
	}{
		{"after text", []string{created, delta}, retry.NotRetryable, "stream_interrupted_after_content"},
		{"before text", []string{created}, retry.Transient, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
				hijack(t, w, chunkedSSE(tc.events...))
			})
			p := newProvider(t, srv.URL, "responses", 0)
			m := p.Stream(bg(), request(user(1, "hi")), nil)
			wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
			wantContains(t, m.GetErrorMessage(), "unexpected EOF")
			if m.GetStopDetails().GetType() != tc.detail {
				t.Errorf("stop details %v", m.GetStopDetails())
			}
			if tc.detail != "" && textOf(m) != "Once" {
				t.Errorf("partial text %q", textOf(m))
			}
			wantClass(t, m, tc.class)
		})
	}
}

func TestResponsesHTTPErrorHeaders(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		w.Header().Set("Retry-After", "3")
		jsonError(w, 429, "Rate limit reached", "requests", "rate_limit_exceeded")
	})
	p := newProvider(t, srv.URL, "responses", 0)
	m := p.Stream(bg(), request(user(1, "hi")), nil)
	wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
	if m.GetHttpStatus() != 429 || m.GetHeaders()["retry-after"] != "3" {
		t.Errorf("status %d headers %v", m.GetHttpStatus(), m.GetHeaders())
	}
	wantClass(t, m, retry.Transient)
	if srv.hitCount() != 1 {
		t.Errorf("hits %d", srv.hitCount())
	}
}

func TestResponsesResetDuringCall(t *testing.T) {
	// A reset while a call runs wins: the call's response is not remembered.
	var p *Provider
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		p.ResetSession("s1")
		streamText(w, "resp_1", "ok")
	})
	p = newProvider(t, srv.URL, "responses", 0)
	m := p.Stream(bg(), request(user(1, "a")), nil)
	wantStop(t, m, messages.StopReason_STOP_REASON_STOP)
	p.Stream(bg(), request(user(1, "a"), assistant(2, m), user(3, "b")), nil)
	if _, ok := srv.body(t, 1)["previous_response_id"]; ok {
		t.Error("response of a call that raced a reset was chained")
	}
}
