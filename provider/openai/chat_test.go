package openai

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

func TestChatTextStreaming(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		sseHeaders(w)
		sendData(w, chunk(map[string]any{"role": "assistant", "content": ""}, ""))
		sendData(w, textChunk("Hello"))
		sendData(w, textChunk(", world"))
		sendData(w, chunk(map[string]any{}, "stop"))
		sendData(w, "[DONE]")
	})
	p := newProvider(t, srv.URL+"/v1", "", 0)
	var rec recorder
	m := p.Stream(bg(), request(user(1, "hi")), rec.on)
	wantStop(t, m, messages.StopReason_STOP_REASON_STOP)
	if got := textOf(m); got != "Hello, world" {
		t.Errorf("text %q", got)
	}
	if got := rec.text("text"); got != "Hello, world" || rec.count("text") != 2 {
		t.Errorf("deltas %q in %d pieces", got, rec.count("text"))
	}
	if m.GetHttpStatus() != 200 || m.GetErrorMessage() != "" || len(m.GetContent()) != 1 {
		t.Errorf("status %d, error %q, %d blocks", m.GetHttpStatus(), m.GetErrorMessage(), len(m.GetContent()))
	}
	wantClass(t, m, retry.Success)

	srv.mu.Lock()
	path, auth := srv.paths[0], srv.headers[0].Get("Authorization")
	retryCount := srv.headers[0].Get("X-Stainless-Retry-Count")
	srv.mu.Unlock()
	if path != "/v1/chat/completions" || auth != "Bearer sk-test" {
		t.Errorf("path %q, auth %q", path, auth)
	}
	if retryCount != "0" {
		t.Errorf("retry count header %q", retryCount)
	}
	body := srv.body(t, 0)
	if body["model"] != "gpt-test" || body["stream"] != true {
		t.Errorf("body %v", body)
	}
}

func TestChatRequestMapping(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		sseHeaders(w)
		sendData(w, textChunk("ok"))
		sendData(w, chunk(map[string]any{}, "stop"))
		sendData(w, "[DONE]")
	})
	p := New(Config{BaseURL: srv.URL, MaxTokens: 123, HTTPClient: &http.Client{Transport: &http.Transport{}}})
	t.Cleanup(p.cfg.HTTPClient.CloseIdleConnections)
	req := request(
		user(1, "question"),
		assistant(2, &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_TOOL_USE, Content: []*messages.ContentBlock{
			{Block: &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{Thinking: "secret", Signature: "sig"}}},
			textBlock("let me look"),
			toolBlock("call_1", "search", `{"q":"x"}`),
		}}),
		toolResult(3, "call_1", "search", "found it"),
		nil,
		modelChange(4),
		// A failed turn is not sent back, nor a result answering nothing.
		assistant(5, &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR, ErrorMessage: "boom",
			Content: []*messages.ContentBlock{textBlock("partial")}}),
		toolResult(6, "call_zzz", "search", "orphan"),
		assistant(7, &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_TOOL_USE, Content: []*messages.ContentBlock{
			toolBlock("call_2", "search", ""),
		}}),
		user(8, "next"), // call_2 has no result: a placeholder is sent before this
	)
	req.Tools = []provider.ToolSpec{
		{Name: "search", Description: "Search things", SchemaJSON: `{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`},
		{Name: "noargs"},
	}
	m := p.Stream(bg(), req, nil)
	wantStop(t, m, messages.StopReason_STOP_REASON_STOP)

	body := srv.body(t, 0)
	if body["max_completion_tokens"] != float64(123) {
		t.Errorf("max_completion_tokens %v", body["max_completion_tokens"])
	}
	got, _ := json.Marshal(body["messages"])
	want := `[{"content":"question","role":"user"},` +
		`{"content":"let me look","role":"assistant","tool_calls":[{"function":{"arguments":"{\"q\":\"x\"}","name":"search"},"id":"call_1","type":"function"}]},` +
		`{"content":"found it","role":"tool","tool_call_id":"call_1"},` +
		`{"role":"assistant","tool_calls":[{"function":{"arguments":"{}","name":"search"},"id":"call_2","type":"function"}]},` +
		`{"content":"No result provided","role":"tool","tool_call_id":"call_2"},` +
		`{"content":"next","role":"user"}]`
	if string(got) != want {
		t.Errorf("messages\n got %s\nwant %s", got, want)
	}
	tools, _ := json.Marshal(body["tools"])
	wantTools := `[{"function":{"description":"Search things","name":"search","parameters":{"properties":{"q":{"type":"string"}},"required":["q"],"type":"object"}},"type":"function"},` +
		`{"function":{"name":"noargs","parameters":{"type":"object"}},"type":"function"}]`
	if string(tools) != wantTools {
		t.Errorf("tools\n got %s\nwant %s", tools, wantTools)
	}
}

func TestChatInvalidToolSchema(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {})
	p := newProvider(t, srv.URL, "", 0)
	req := request(user(1, "hi"))
	req.Tools = []provider.ToolSpec{{Name: "bad", SchemaJSON: "{not json"}}
	m := p.Stream(bg(), req, nil)
	wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
	wantContains(t, m.GetErrorMessage(), `tool "bad"`)
	wantClass(t, m, retry.NotRetryable)
	if srv.hitCount() != 0 {
		t.Errorf("request sent with a bad schema")
	}
}

func TestChatToolCall(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		sseHeaders(w)
		sendData(w, chunk(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{
			map[string]any{"index": 0, "id": "call_abc", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": ""}},
		}}, ""))
		sendData(w, chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": `{"city":`}}}}, ""))
		sendData(w, chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": `"Paris"}`}}}}, ""))
		sendData(w, chunk(map[string]any{"tool_calls": []any{
			map[string]any{"index": 1, "id": "call_def", "type": "function", "function": map[string]any{"name": "get_time", "arguments": "{}"}},
		}}, ""))
		sendData(w, chunk(map[string]any{}, "tool_calls"))
		sendData(w, "[DONE]")
	})
	p := newProvider(t, srv.URL, "chat", 0)
	var rec recorder
	m := p.Stream(bg(), request(user(1, "weather?")), rec.on)
	wantStop(t, m, messages.StopReason_STOP_REASON_TOOL_USE)
	calls := callsOf(m)
	if len(calls) != 2 {
		t.Fatalf("calls %v", calls)
	}
	if c := calls[0]; c.GetId() != "call_abc" || c.GetName() != "get_weather" || c.GetArgumentsJson() != `{"city":"Paris"}` {
		t.Errorf("call 0 %v", c)
	}
	if c := calls[1]; c.GetId() != "call_def" || c.GetName() != "get_time" || c.GetArgumentsJson() != "{}" {
		t.Errorf("call 1 %v", c)
	}
	if rec.count("tool_call") != 4 || rec.text("tool_call") != `{"city":"Paris"}{}` {
		t.Errorf("tool deltas %d %q", rec.count("tool_call"), rec.text("tool_call"))
	}
	if textOf(m) != "" {
		t.Errorf("text %q", textOf(m))
	}
}

func TestChatFinishReasons(t *testing.T) {
	for _, tc := range []struct {
		finish string
		want   messages.StopReason
		class  retry.Class
		detail string
	}{
		{"length", messages.StopReason_STOP_REASON_LENGTH, retry.Success, ""},
		{"content_filter", messages.StopReason_STOP_REASON_ERROR, retry.ClassifierRefusal, "sensitive"},
	} {
		t.Run(tc.finish, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
				sseHeaders(w)
				sendData(w, textChunk("partial answer"))
				sendData(w, chunk(map[string]any{}, tc.finish))
				sendData(w, "[DONE]")
			})
			p := newProvider(t, srv.URL, "", 0)
			m := p.Stream(bg(), request(user(1, "hi")), nil)
			wantStop(t, m, tc.want)
			if textOf(m) != "partial answer" {
				t.Errorf("text %q", textOf(m))
			}
			if m.GetStopDetails().GetType() != tc.detail {
				t.Errorf("stop details %v", m.GetStopDetails())
			}
			if tc.detail != "" {
				wantContains(t, m.GetErrorMessage(), "content filter")
			}
			wantClass(t, m, tc.class)
		})
	}
}

// TestChatRefusalWords: a content_filter finish keeps the provider's words.
// Its error message is the error text sent with it (on the finish chunk or
// right after it), verbatim; without one, the explanation of its
// stop_details; with neither, the default. The stop details keep their
// type, category and explanation either way.
func TestChatRefusalWords(t *testing.T) {
	const (
		errText     = "Refusal (cyber): Classifier declined this turn."
		explanation = "Classifier declined this turn."
		filtered    = "The response was stopped by the provider's content filter (finish_reason: content_filter)"
	)
	details := map[string]any{"type": "refusal", "category": "cyber", "explanation": explanation}
	fields := map[string]string{"category": "cyber", "explanation": explanation}
	errObj := map[string]any{"message": errText, "type": "content_filter", "param": nil, "code": "content_filter"}
	// finish is the content_filter finish chunk with fields added to its
	// choice and to the chunk itself.
	finish := func(onChoice, onChunk map[string]any) string {
		var c map[string]any
		_ = json.Unmarshal([]byte(chunk(map[string]any{}, "content_filter")), &c)
		maps.Copy(c["choices"].([]any)[0].(map[string]any), onChoice)
		maps.Copy(c, onChunk)
		b, _ := json.Marshal(c)
		return string(b)
	}
	jsonOf := func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	for _, tc := range []struct {
		name       string
		events     []string // after a text chunk
		want       string
		wantType   string
		wantFields map[string]string
	}{
		{"error text and stop details on the choice",
			[]string{finish(map[string]any{"stop_details": details}, map[string]any{"error": errObj})}, errText, "refusal", fields},
		{"error text and stop details on the chunk",
			[]string{finish(nil, map[string]any{"stop_details": details, "error": errObj})}, errText, "refusal", fields},
		{"error text on the chunk after the finish",
			[]string{finish(map[string]any{"stop_details": details}, nil), jsonOf(map[string]any{"error": errObj})}, errText, "refusal", fields},
		{"error text as a string",
			[]string{finish(nil, map[string]any{"error": errText})}, errText, "sensitive", nil},
		{"error text without stop details",
			[]string{finish(nil, map[string]any{"error": errObj})}, errText, "sensitive", nil},
		{"stop details without error text",
			[]string{finish(map[string]any{"stop_details": details}, nil), "[DONE]"}, explanation, "refusal", fields},
		{"an error without a message",
			[]string{finish(map[string]any{"stop_details": details}, map[string]any{"error": map[string]any{"code": "content_filter"}})}, explanation, "refusal", fields},
		{"neither", []string{finish(nil, nil), "[DONE]"}, filtered, "sensitive", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
				sseHeaders(w)
				sendData(w, textChunk("I can't"))
				for _, e := range tc.events {
					sendData(w, e)
				}
			})
			m := newProvider(t, srv.URL, "chat", 0).Stream(bg(), request(user(1, "hi")), nil)
			wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
			if m.GetErrorMessage() != tc.want {
				t.Errorf("error message %q, want %q", m.GetErrorMessage(), tc.want)
			}
			if d := m.GetStopDetails(); d.GetType() != tc.wantType || !reflect.DeepEqual(d.GetFields(), tc.wantFields) {
				t.Errorf("stop details %v, want type %q fields %v", d, tc.wantType, tc.wantFields)
			}
			if textOf(m) != "I can't" {
				t.Errorf("text %q", textOf(m))
			}
			wantClass(t, m, retry.ClassifierRefusal)
		})
	}
}

func TestChatHTTPErrors(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name     string
		status   int
		headers  map[string]string
		body     string // raw body; JSON error when empty
		message  string
		typ      string
		code     string
		contains []string
		class    retry.Class
		hint     time.Duration
	}{
		{name: "429 retry-after", status: 429, headers: map[string]string{"Retry-After": "7"},
			message: "Rate limit reached for gpt-test in organization org-1 on requests per min (RPM): Limit 3, Used 3.", typ: "requests", code: "rate_limit_exceeded",
			contains: []string{"429 Too Many Requests: Rate limit reached", "(code: rate_limit_exceeded, type: requests)"}, class: retry.Transient, hint: 7 * time.Second},
		{name: "429 retry-after-ms", status: 429, headers: map[string]string{"Retry-After-Ms": "1500", "Retry-After": "9"},
			message: "Rate limit reached", typ: "requests", code: "rate_limit_exceeded",
			contains: []string{"429 Too Many Requests"}, class: retry.Transient, hint: 1500 * time.Millisecond},
		{name: "429 x-ratelimit-reset-ms", status: 429, headers: map[string]string{"X-RateLimit-Reset-Ms": "2500"},
			message: "Rate limit reached", typ: "tokens", code: "rate_limit_exceeded",
			contains: []string{"429 Too Many Requests"}, class: retry.Transient, hint: 2500 * time.Millisecond},
		{name: "429 quota", status: 429,
			message: "You exceeded your current quota, please check your plan and billing details.", typ: "insufficient_quota", code: "insufficient_quota",
			contains: []string{"429 Too Many Requests: You exceeded your current quota", "(code: insufficient_quota)"}, class: retry.UsageLimit},
		{name: "500", status: 500, message: "The server had an error while processing your request. Sorry about that!", typ: "server_error",
			contains: []string{"500 Internal Server Error: The server had an error"}, class: retry.Transient},
		{name: "503", status: 503, message: "The engine is currently overloaded, please try again later", typ: "server_error",
			contains: []string{"503 Service Unavailable: The engine is currently overloaded"}, class: retry.Transient},
		{name: "502 html", status: 502, body: "<html><body>bad gateway</body></html>",
			contains: []string{"502 Bad Gateway: <html><body>bad gateway</body></html>"}, class: retry.Transient},
		{name: "503 empty body", status: 503, body: " ", contains: []string{"503 Service Unavailable"}, class: retry.Transient},
		{name: "401", status: 401, message: "Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.", typ: "invalid_request_error", code: "invalid_api_key",
			contains: []string{"401 Unauthorized: Incorrect API key provided", "(code: invalid_api_key, type: invalid_request_error)"}, class: retry.NotRetryable},
		{name: "context length", status: 400,
			message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130500 tokens. Please reduce the length of the messages.", typ: "invalid_request_error", code: "context_length_exceeded",
			contains: []string{"400 Bad Request: This model's maximum context length is 128000 tokens", "(code: context_length_exceeded"}, class: retry.ContextOverflow},
		{name: "400 bad request", status: 400, message: "Invalid value for 'model'", typ: "invalid_request_error",
			contains: []string{"400 Bad Request: Invalid value for 'model' (type: invalid_request_error)"}, class: retry.NotRetryable},
		{name: "error string", status: 500, body: `{"error":"upstream exploded"}`, contains: []string{"500 Internal Server Error: upstream exploded"}, class: retry.Transient},
		{name: "top-level message", status: 429, body: `{"message":"slow down","code":429}`, contains: []string{"429 Too Many Requests: slow down (code: 429)"}, class: retry.Transient},
		{name: "error without message", status: 403, body: `{"error":{"code":"forbidden"}}`,
			contains: []string{`403 Forbidden: {"error":{"code":"forbidden"}} (code: forbidden)`}, class: retry.NotRetryable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
				for k, v := range tc.headers {
					w.Header().Set(k, v)
				}
				w.Header().Set("X-Request-Id", "req_123")
				if tc.body != "" {
					w.WriteHeader(tc.status)
					_, _ = w.Write([]byte(tc.body))
					return
				}
				jsonError(w, tc.status, tc.message, tc.typ, tc.code)
			})
			p := newProvider(t, srv.URL, "", 0)
			var rec recorder
			m := p.Stream(bg(), request(user(1, "hi")), rec.on)
			wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
			if int(m.GetHttpStatus()) != tc.status {
				t.Errorf("status %d, want %d", m.GetHttpStatus(), tc.status)
			}
			wantContains(t, m.GetErrorMessage(), tc.contains...)
			if m.GetHeaders()["x-request-id"] != "req_123" {
				t.Errorf("headers %v", m.GetHeaders())
			}
			for k, v := range tc.headers {
				if got, ok := m.GetHeaders()[strings.ToLower(k)]; !ok || got != v {
					t.Errorf("header %s = %q (present %v), want %q", strings.ToLower(k), got, ok, v)
				}
			}
			for k := range m.GetHeaders() {
				if k != strings.ToLower(k) {
					t.Errorf("header name %q not lower-case", k)
				}
			}
			wantClass(t, m, tc.class)
			if tc.hint > 0 {
				h, ok := retry.ParseHint(m.GetHeaders(), m.GetErrorMessage(), now)
				if !ok || h.Delay != tc.hint {
					t.Errorf("hint %v %v, want %v", h, ok, tc.hint)
				}
			}
			if srv.hitCount() != 1 {
				t.Errorf("server hit %d times, want 1 (SDK retries must be off)", srv.hitCount())
			}
			if len(rec.deltas) != 0 || len(m.GetContent()) != 0 {
				t.Errorf("deltas %v, content %v", rec.deltas, m.GetContent())
			}
		})
	}
}

func TestChatNoSDKRetries(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		w.Header().Set("Retry-After-Ms", "1")
		jsonError(w, 503, "Service Unavailable", "server_error", "")
	})
	p := newProvider(t, srv.URL, "", 0)
	for range 3 {
		m := p.Stream(bg(), request(user(1, "hi")), nil)
		wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
	}
	if srv.hitCount() != 3 {
		t.Errorf("3 calls hit the server %d times", srv.hitCount())
	}
}

func TestChatConnectionRefused(t *testing.T) {
	p := newProvider(t, "http://"+closedAddr(t)+"/v1", "", 0)
	m := p.Stream(bg(), request(user(1, "hi")), nil)
	wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
	wantContains(t, m.GetErrorMessage(), "connect: connection refused")
	if m.GetHttpStatus() != 0 || m.GetHeaders() != nil {
		t.Errorf("status %d headers %v", m.GetHttpStatus(), m.GetHeaders())
	}
	wantClass(t, m, retry.Transient)
}

func TestChatStreamCutAfterText(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		hijack(t, w, chunkedSSE(textChunk("Once upon"), textChunk(" a time")))
	})
	p := newProvider(t, srv.URL, "", 0)
	var rec recorder
	m := p.Stream(bg(), request(user(1, "story")), rec.on)
	wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
	if textOf(m) != "Once upon a time" || rec.text("text") != "Once upon a time" {
		t.Errorf("partial text %q, deltas %q", textOf(m), rec.text("text"))
	}
	if m.GetStopDetails().GetType() != "stream_interrupted_after_content" {
		t.Errorf("stop details %v", m.GetStopDetails())
	}
	wantContains(t, m.GetErrorMessage(), "unexpected EOF")
	wantClass(t, m, retry.NotRetryable)
}

func TestChatStreamCutAfterToolCall(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		hijack(t, w, chunkedSSE(chunk(map[string]any{"tool_calls": []any{
			map[string]any{"index": 0, "id": "call_1", "type": "function", "function": map[string]any{"name": "f", "arguments": `{"a":`}},
		}}, "")))
	})
	p := newProvider(t, srv.URL, "", 0)
	m := p.Stream(bg(), request(user(1, "go")), nil)
	wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
	if m.GetStopDetails().GetType() != "stream_interrupted_after_content" || len(callsOf(m)) != 1 {
		t.Errorf("stop details %v, content %v", m.GetStopDetails(), m.GetContent())
	}
	wantClass(t, m, retry.NotRetryable)
}

func TestChatStreamCutBeforeText(t *testing.T) {
	for name, raw := range map[string]string{
		"after role chunk": chunkedSSE(chunk(map[string]any{"role": "assistant", "content": ""}, "")),
		"after headers":    chunkedSSE(),
		"before headers":   "",
	} {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
				hijack(t, w, raw)
			})
			p := newProvider(t, srv.URL, "", 0)
			var rec recorder
			m := p.Stream(bg(), request(user(1, "hi")), rec.on)
			wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
			if m.GetStopDetails() != nil || len(m.GetContent()) != 0 || rec.count("text") != 0 {
				t.Errorf("stop details %v, content %v", m.GetStopDetails(), m.GetContent())
			}
			if m.GetErrorMessage() == "" || m.GetHttpStatus() != 0 {
				t.Errorf("error %q status %d", m.GetErrorMessage(), m.GetHttpStatus())
			}
			t.Logf("error text: %s", m.GetErrorMessage())
			wantClass(t, m, retry.Transient)
		})
	}
}

func TestChatStreamEndsWithoutFinish(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		sseHeaders(w)
		sendData(w, textChunk("half"))
		// a clean end of the body, but no finish_reason and no [DONE]
	})
	p := newProvider(t, srv.URL, "", 0)
	m := p.Stream(bg(), request(user(1, "hi")), nil)
	wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
	wantContains(t, m.GetErrorMessage(), "connection closed before the stream completed")
	if textOf(m) != "half" || m.GetStopDetails().GetType() != "stream_interrupted_after_content" {
		t.Errorf("text %q details %v", textOf(m), m.GetStopDetails())
	}
}

func TestChatFinishThenCut(t *testing.T) {
	// The whole turn arrived; the connection broke before [DONE].
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		hijack(t, w, chunkedSSE(textChunk("done"), chunk(map[string]any{}, "stop")))
	})
	p := newProvider(t, srv.URL, "", 0)
	m := p.Stream(bg(), request(user(1, "hi")), nil)
	wantStop(t, m, messages.StopReason_STOP_REASON_STOP)
	if textOf(m) != "done" {
		t.Errorf("text %q", textOf(m))
	}
}

func TestChatInStreamError(t *testing.T) {
	for name, tc := range map[string]struct {
		before   bool
		contains string
		class    retry.Class
	}{
		"before output": {false, "The server is overloaded (code: server_error)", retry.Transient},
		"after output":  {true, "The server is overloaded", retry.NotRetryable},
	} {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
				sseHeaders(w)
				if tc.before {
					sendData(w, textChunk("some"))
				}
				sendData(w, `{"error":{"message":"The server is overloaded","type":"server_error","code":"server_error","param":null}}`)
			})
			p := newProvider(t, srv.URL, "", 0)
			m := p.Stream(bg(), request(user(1, "hi")), nil)
			wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
			wantContains(t, m.GetErrorMessage(), tc.contains)
			wantClass(t, m, tc.class)
			if tc.before != (m.GetStopDetails().GetType() == "stream_interrupted_after_content") {
				t.Errorf("stop details %v", m.GetStopDetails())
			}
		})
	}
}

func TestChatOddServerOutput(t *testing.T) {
	for name, handler := range map[string]func(w http.ResponseWriter){
		"garbage data": func(w http.ResponseWriter) {
			sseHeaders(w)
			sendData(w, "{not json")
		},
		"json body instead of a stream": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`))
		},
		"wrong field types": func(w http.ResponseWriter) {
			sseHeaders(w)
			sendData(w, `{"choices":[{"index":"zero","delta":{"content":5,"tool_calls":"no"},"finish_reason":7}]}`)
			sendData(w, `{"choices":null}`)
			sendData(w, `[]`)
			sendData(w, `null`)
		},
		"empty": func(w http.ResponseWriter) {
			sseHeaders(w)
		},
		"tool call without index or id": func(w http.ResponseWriter) {
			sseHeaders(w)
			sendData(w, `{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`)
			sendData(w, "[DONE]")
		},
	} {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) { handler(w) })
			p := newProvider(t, srv.URL, "", 0)
			m := p.Stream(bg(), request(user(1, "hi")), nil)
			if m == nil {
				t.Fatal("nil message")
			}
			t.Logf("stop %v error %q content %v", m.GetStopReason(), m.GetErrorMessage(), m.GetContent())
			if m.GetStopReason() == messages.StopReason_STOP_REASON_ERROR && m.GetErrorMessage() == "" {
				t.Error("error without text")
			}
		})
	}
}

func TestChatCallerCancelMidStream(t *testing.T) {
	disconnected := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		sseHeaders(w)
		sendData(w, textChunk("partial"))
		select {
		case <-r.Context().Done():
			close(disconnected)
		case <-s.release:
		}
	})
	p := newProvider(t, srv.URL, "", 0)
	ctx, cancel := context.WithCancel(bg())
	defer cancel()
	var rec recorder
	cancelled := make(chan time.Time, 1)
	var once sync.Once
	m := p.Stream(ctx, request(user(1, "hi")), func(d provider.Delta) {
		rec.on(d)
		once.Do(func() {
			go func() {
				time.Sleep(50 * time.Millisecond)
				cancelled <- time.Now()
				cancel()
			}()
		})
	})
	returned := time.Now()
	wantStop(t, m, messages.StopReason_STOP_REASON_ABORTED)
	if m.GetErrorMessage() != "Request was aborted" || textOf(m) != "partial" || m.GetStopDetails() != nil {
		t.Errorf("error %q text %q details %v", m.GetErrorMessage(), textOf(m), m.GetStopDetails())
	}
	select {
	case at := <-cancelled:
		if d := returned.Sub(at); d > time.Second {
			t.Errorf("returned %v after the cancel", d)
		}
	default:
		t.Error("returned before the cancel")
	}
	// A content-carrying abort is not a reason-less one.
	wantClass(t, m, retry.NotRetryable)
	select {
	case <-disconnected:
	case <-time.After(2 * time.Second):
		t.Error("server did not see the disconnect")
	}
}

func TestChatCallerCancelBeforeHeaders(t *testing.T) {
	disconnected := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		select {
		case <-r.Context().Done():
			close(disconnected)
		case <-s.release:
		}
	})
	p := newProvider(t, srv.URL, "", 0)
	ctx, cancel := context.WithTimeout(bg(), 100*time.Millisecond) // the caller's own deadline is a cancellation too
	defer cancel()
	start := time.Now()
	m := p.Stream(ctx, request(user(1, "hi")), nil)
	wantStop(t, m, messages.StopReason_STOP_REASON_ABORTED)
	if time.Since(start) > time.Second {
		t.Errorf("abort took %v", time.Since(start))
	}
	wantClass(t, m, retry.ReasonlessAbort)
	select {
	case <-disconnected:
	case <-time.After(2 * time.Second):
		t.Error("server did not see the disconnect")
	}
}

func TestChatAlreadyCancelled(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {})
	p := newProvider(t, srv.URL, "", 0)
	ctx, cancel := context.WithCancel(bg())
	cancel()
	m := p.Stream(ctx, request(user(1, "hi")), nil)
	wantStop(t, m, messages.StopReason_STOP_REASON_ABORTED)
	if srv.hitCount() != 0 {
		t.Error("a cancelled call reached the server")
	}
}

func TestChatRequestTimeout(t *testing.T) {
	for name, tc := range map[string]struct {
		text  bool // some text before the stall
		class retry.Class
	}{
		"stalled before headers": {},
		"stalled mid-stream":     {text: true, class: retry.NotRetryable},
	} {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
				if tc.text {
					sseHeaders(w)
					sendData(w, textChunk("slow"))
				}
				select {
				case <-r.Context().Done():
				case <-s.release:
				}
			})
			p := newProvider(t, srv.URL, "", 200*time.Millisecond)
			start := time.Now()
			m := p.Stream(bg(), request(user(1, "hi")), nil)
			wantStop(t, m, messages.StopReason_STOP_REASON_ERROR)
			wantContains(t, m.GetErrorMessage(), "context deadline exceeded")
			t.Logf("error text: %s", m.GetErrorMessage())
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("timeout took %v", d)
			}
			want := retry.Transient
			if tc.text {
				want = retry.NotRetryable
				if textOf(m) != "slow" || m.GetStopDetails().GetType() != "stream_interrupted_after_content" {
					t.Errorf("text %q details %v", textOf(m), m.GetStopDetails())
				}
			}
			wantClass(t, m, want)
		})
	}
}

func TestChatConcurrentSessions(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		sseHeaders(w)
		sendData(w, textChunk("x"))
		sendData(w, chunk(map[string]any{}, "stop"))
		sendData(w, "[DONE]")
	})
	p := newProvider(t, srv.URL, "", 0)
	done := make(chan *messages.AssistantMessage)
	for range 20 {
		go func() { done <- p.Stream(bg(), request(user(1, "hi")), nil) }()
	}
	for range 20 {
		wantStop(t, <-done, messages.StopReason_STOP_REASON_STOP)
	}
}
