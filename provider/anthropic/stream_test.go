package anthropic

import (
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

func TestTextStreaming(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		writeEvents(w, textStream("end_turn", "Hello", ", ", "world")...)
	})
	p := newProvider(t, s.URL, Config{})
	msg, rec := stream(t, p, userRequest("hi"))

	wantStop(t, msg, messages.StopReason_STOP_REASON_STOP)
	wantStamped(t, msg, "claude-test")
	if got := textOf(msg); got != "Hello, world" {
		t.Fatalf("text = %q", got)
	}
	if len(msg.GetContent()) != 1 {
		t.Fatalf("content = %v", msg.GetContent())
	}
	if rec.joined("text") != "Hello, world" || rec.count("text") != 3 {
		t.Fatalf("deltas = %+v", rec.deltas)
	}
	if msg.GetHttpStatus() != 200 || msg.GetErrorMessage() != "" || msg.GetStopDetails() != nil {
		t.Fatalf("status %d error %q details %v", msg.GetHttpStatus(), msg.GetErrorMessage(), msg.GetStopDetails())
	}
	wantClass(t, msg, retry.Success)

	// The request: streaming POST /v1/messages with the request's model and key.
	req := s.lastRequest(t)
	if req.Method != http.MethodPost || req.URL.Path != "/v1/messages" {
		t.Fatalf("request %s %s", req.Method, req.URL.Path)
	}
	// This SDK version sends WithAPIKey as a bearer token; accept either form.
	if req.Header.Get("Authorization") != "Bearer sk-test" && req.Header.Get("X-Api-Key") != "sk-test" {
		t.Fatalf("credential headers: authorization %q x-api-key %q", req.Header.Get("Authorization"), req.Header.Get("X-Api-Key"))
	}
	body := s.lastBody(t)
	if body["stream"] != true || body["model"] != "claude-test" || body["max_tokens"] != float64(4096) {
		t.Fatalf("body = %v", body)
	}
	if _, ok := body["thinking"]; ok {
		t.Fatalf("thinking sent without a budget: %v", body["thinking"])
	}
	msgs := body["messages"].([]any)
	if len(msgs) != 1 {
		t.Fatalf("messages = %v", msgs)
	}
	first := msgs[0].(map[string]any)
	content := first["content"].([]any)[0].(map[string]any)
	if first["role"] != "user" || content["type"] != "text" || content["text"] != "hi" {
		t.Fatalf("message = %v", first)
	}
}

func TestAPIKeyPerRequest(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		writeEvents(w, textStream("end_turn", "ok")...)
	})
	p := newProvider(t, s.URL, Config{})
	for _, key := range []string{"sk-one", "sk-two"} {
		req := userRequest("hi")
		req.APIKey = key
		msg, _ := stream(t, p, req)
		wantStop(t, msg, messages.StopReason_STOP_REASON_STOP)
		h := s.lastRequest(t).Header
		if h.Get("Authorization") != "Bearer "+key && h.Get("X-Api-Key") != key {
			t.Fatalf("key %s: authorization %q x-api-key %q", key, h.Get("Authorization"), h.Get("X-Api-Key"))
		}
	}
}

func TestThinkingWithSignature(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		writeEvents(w,
			evMessageStart(),
			evBlockStart(0, `{"type":"thinking","thinking":"","signature":""}`),
			evDelta(0, `{"type":"thinking_delta","thinking":"Let me think"}`),
			evDelta(0, `{"type":"thinking_delta","thinking":" about it."}`),
			evDelta(0, `{"type":"signature_delta","signature":"sig-abc=="}`),
			evBlockStop(0),
			evBlockStart(1, `{"type":"redacted_thinking","data":"ENCRYPTED"}`),
			evBlockStop(1),
			evTextStart(2),
			evText(2, "Answer."),
			evBlockStop(2),
			evMessageDelta("end_turn"),
			evMessageStop(),
		)
	})
	p := newProvider(t, s.URL, Config{MaxTokens: 8000, ThinkingBudget: 2048})
	msg, rec := stream(t, p, userRequest("think"))

	wantStop(t, msg, messages.StopReason_STOP_REASON_STOP)
	c := msg.GetContent()
	if len(c) != 3 {
		t.Fatalf("content = %v", c)
	}
	if th := c[0].GetThinking(); th.GetThinking() != "Let me think about it." || th.GetSignature() != "sig-abc==" {
		t.Fatalf("thinking = %v", c[0])
	}
	if c[1].GetRedactedThinking().GetData() != "ENCRYPTED" {
		t.Fatalf("redacted = %v", c[1])
	}
	if c[2].GetText().GetText() != "Answer." {
		t.Fatalf("text = %v", c[2])
	}
	if rec.joined("thinking") != "Let me think about it." || rec.joined("text") != "Answer." {
		t.Fatalf("deltas = %+v", rec.deltas)
	}
	body := s.lastBody(t)
	th, _ := body["thinking"].(map[string]any)
	if th["type"] != "enabled" || th["budget_tokens"] != float64(2048) || body["max_tokens"] != float64(8000) {
		t.Fatalf("thinking = %v, max_tokens = %v", body["thinking"], body["max_tokens"])
	}
}

func TestToolUse(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		writeEvents(w,
			evMessageStart(),
			evTextStart(0),
			evText(0, "Reading."),
			evBlockStop(0),
			evBlockStart(1, `{"type":"tool_use","id":"toolu_01","name":"read_file","input":{}}`),
			evDelta(1, `{"type":"input_json_delta","partial_json":""}`),
			evDelta(1, `{"type":"input_json_delta","partial_json":"{\"path\": "}`),
			evDelta(1, `{"type":"input_json_delta","partial_json":"\"a.txt\"}"}`),
			evBlockStop(1),
			evBlockStart(2, `{"type":"tool_use","id":"toolu_02","name":"list","input":{}}`),
			evBlockStop(2),
			evMessageDelta("tool_use"),
			evMessageStop(),
		)
	})
	p := newProvider(t, s.URL, Config{})
	req := userRequest("read a.txt")
	req.Tools = []provider.ToolSpec{
		{Name: "read_file", Description: "Read a file", SchemaJSON: `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`},
		{Name: "list"},
		{Name: "untyped", SchemaJSON: `{"properties":{"n":{"type":"integer"}}}`},
	}
	msg, rec := stream(t, p, req)

	wantStop(t, msg, messages.StopReason_STOP_REASON_TOOL_USE)
	c := msg.GetContent()
	if len(c) != 3 || c[0].GetText().GetText() != "Reading." {
		t.Fatalf("content = %v", c)
	}
	tc := c[1].GetToolCall()
	if tc.GetId() != "toolu_01" || tc.GetName() != "read_file" || tc.GetArgumentsJson() != `{"path": "a.txt"}` {
		t.Fatalf("tool call = %v", tc)
	}
	if tc2 := c[2].GetToolCall(); tc2.GetId() != "toolu_02" || tc2.GetArgumentsJson() != "{}" {
		t.Fatalf("second tool call = %v", tc2)
	}
	if rec.joined("tool_call") != `{"path": "a.txt"}` {
		t.Fatalf("tool deltas = %+v", rec.deltas)
	}

	tools := s.lastBody(t)["tools"].([]any)
	if len(tools) != 3 {
		t.Fatalf("tools = %v", tools)
	}
	t0 := tools[0].(map[string]any)
	schema := t0["input_schema"].(map[string]any)
	if t0["name"] != "read_file" || t0["description"] != "Read a file" || schema["type"] != "object" ||
		schema["properties"].(map[string]any)["path"] == nil || schema["required"].([]any)[0] != "path" {
		t.Fatalf("tool 0 = %v", t0)
	}
	if s1 := tools[1].(map[string]any)["input_schema"].(map[string]any); len(s1) != 1 || s1["type"] != "object" {
		t.Fatalf("default schema = %v", s1)
	}
	if s2 := tools[2].(map[string]any)["input_schema"].(map[string]any); s2["type"] != "object" || s2["properties"] == nil {
		t.Fatalf("schema without type = %v", s2)
	}
}

func TestInvalidToolSchemaFailsWithoutRequest(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		writeEvents(w, textStream("end_turn", "ok")...)
	})
	p := newProvider(t, s.URL, Config{})
	req := userRequest("x")
	req.Tools = []provider.ToolSpec{{Name: "bad", SchemaJSON: `[1,2`}}
	msg, _ := stream(t, p, req)
	wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
	if !strings.Contains(msg.GetErrorMessage(), `"bad"`) || s.hitCount() != 0 {
		t.Fatalf("error %q, hits %d", msg.GetErrorMessage(), s.hitCount())
	}
	wantClass(t, msg, retry.NotRetryable)
}

func TestStopReasons(t *testing.T) {
	tests := []struct {
		reason string
		want   messages.StopReason
	}{
		{"end_turn", messages.StopReason_STOP_REASON_STOP},
		{"stop_sequence", messages.StopReason_STOP_REASON_STOP},
		{"tool_use", messages.StopReason_STOP_REASON_TOOL_USE},
		{"max_tokens", messages.StopReason_STOP_REASON_LENGTH},
		{"model_context_window_exceeded", messages.StopReason_STOP_REASON_LENGTH},
		{"something_new", messages.StopReason_STOP_REASON_STOP},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
				writeEvents(w, textStream(tt.reason, "partial")...)
			})
			msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
			wantStop(t, msg, tt.want)
			if textOf(msg) != "partial" || msg.GetErrorMessage() != "" {
				t.Fatalf("text %q error %q", textOf(msg), msg.GetErrorMessage())
			}
			wantClass(t, msg, retry.Success)
		})
	}
}

// TestRefusal: a refusal stop keeps its partial text and the words of its
// stop_details. The Messages API sends no error text with it, so its error
// message is the explanation, verbatim (trimmed); without one, the default
// naming the category. Category and explanation stay in the stop details.
func TestRefusal(t *testing.T) {
	const explanation = "This request could enable malware development."
	for _, tc := range []struct {
		name       string
		details    string // the stop_details JSON of message_delta
		want       string
		wantFields map[string]string
	}{
		{"category and explanation", `{"type":"refusal","category":"cyber","explanation":` + jsonString(explanation) + `}`,
			explanation, map[string]string{"category": "cyber", "explanation": explanation}},
		{"explanation trimmed", `{"type":"refusal","category":"cyber","explanation":` + jsonString(" "+explanation+"\n") + `}`,
			explanation, map[string]string{"category": "cyber", "explanation": explanation}},
		{"explanation without a category", `{"type":"refusal","category":null,"explanation":` + jsonString(explanation) + `}`,
			explanation, map[string]string{"explanation": explanation}},
		{"category without an explanation", `{"type":"refusal","category":"bio","explanation":null}`,
			"the model refused to continue (stop_reason refusal, category bio)", map[string]string{"category": "bio"}},
		{"no stop details", `null`, "the model refused to continue (stop_reason refusal)", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
				writeEvents(w,
					evMessageStart(),
					evTextStart(0),
					evText(0, "I can start with"),
					evBlockStop(0),
					sse("message_delta", `{"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null,"stop_details":`+tc.details+`},"usage":{"output_tokens":5}}`),
					evMessageStop(),
				)
			})
			msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
			wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
			if msg.GetErrorMessage() != tc.want {
				t.Errorf("error %q, want %q", msg.GetErrorMessage(), tc.want)
			}
			if d := msg.GetStopDetails(); d.GetType() != "refusal" || !reflect.DeepEqual(d.GetFields(), tc.wantFields) {
				t.Errorf("stop details %v, want type refusal fields %v", d, tc.wantFields)
			}
			if textOf(msg) != "I can start with" {
				t.Errorf("partial text = %q", textOf(msg))
			}
			wantClass(t, msg, retry.ClassifierRefusal)
		})
	}
}

func TestOddServerOutput(t *testing.T) {
	t.Run("unknown events, blocks and indexes are ignored", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			writeEvents(w,
				": a comment\n\n",
				evMessageStart(),
				sse("mystery", `{"type":"mystery","x":1}`),
				evText(7, "no such block"),
				evBlockStart(0, `{"type":"server_tool_use","id":"srv_1","name":"web_search","input":{}}`),
				evDelta(0, `{"type":"input_json_delta","partial_json":"{}"}`),
				evBlockStop(0),
				evTextStart(1),
				evDelta(1, `{"type":"input_json_delta","partial_json":"{}"}`),
				evDelta(1, `{"type":"citations_delta","citation":{}}`),
				evText(1, "fine"),
				evBlockStop(1),
				evMessageDelta("end_turn"),
				evMessageStop(),
			)
		})
		msg, rec := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
		wantStop(t, msg, messages.StopReason_STOP_REASON_STOP)
		if textOf(msg) != "fine" || len(msg.GetContent()) != 1 || rec.joined("text") != "fine" || rec.count("tool_call") != 0 {
			t.Fatalf("content %v deltas %+v", msg.GetContent(), rec.deltas)
		}
	})
	t.Run("garbage data is an error, not a panic", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			writeEvents(w, evMessageStart(), sse("content_block_delta", `{not json`))
		})
		msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
		wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
		if !strings.HasPrefix(msg.GetErrorMessage(), "malformed stream event: ") {
			t.Fatalf("error = %q", msg.GetErrorMessage())
		}
	})
	t.Run("empty 200 body", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			writeEvents(w)
		})
		msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
		wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
		if !strings.Contains(msg.GetErrorMessage(), "before message_start") {
			t.Fatalf("error = %q", msg.GetErrorMessage())
		}
		wantClass(t, msg, retry.Transient)
	})
	t.Run("JSON body instead of a stream", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}]}`))
		})
		msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
		wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
	})
	t.Run("message_stop missing after the stop reason", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			evs := textStream("end_turn", "done")
			writeEvents(w, evs[:len(evs)-1]...)
		})
		msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
		wantStop(t, msg, messages.StopReason_STOP_REASON_STOP)
		if textOf(msg) != "done" {
			t.Fatalf("text = %q", textOf(msg))
		}
	})
}

func TestConcurrentStreams(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		writeEvents(w, textStream("end_turn", "a", "b", "c")...)
	})
	p := newProvider(t, s.URL, Config{})
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Go(func() {
			msg, _ := stream(t, p, userRequest("x"))
			if msg.GetStopReason() != messages.StopReason_STOP_REASON_STOP || textOf(msg) != "abc" {
				t.Errorf("stop %v text %q error %q", msg.GetStopReason(), textOf(msg), msg.GetErrorMessage())
			}
		})
	}
	wg.Wait()
	p.ResetSession("s1") // a no-op, safe at any time
}

func TestCallbackPanicPropagates(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		writeEvents(w, textStream("end_turn", "boom")...)
	})
	p := newProvider(t, s.URL, Config{})
	defer func() {
		if r := recover(); r != "caller bug" {
			t.Fatalf("recovered %v, want the callback's panic", r)
		}
	}()
	p.Stream(t.Context(), userRequest("x"), func(provider.Delta) { panic("caller bug") })
	t.Fatal("Stream returned")
}
