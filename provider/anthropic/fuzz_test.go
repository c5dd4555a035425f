package anthropic_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/anthropic"
	"github.com/musepi/musepi/provider/providertest"
)

// The fuzz targets here hand the provider an arbitrary response body, with
// no network: the HTTP client's transport answers every request itself.
// Whatever the body, Stream must return promptly, never panic (the provider
// turns its own panics into "internal error" messages, which count as
// panics here), never return nil, and return a well-formed message.

const fuzzModel = "claude-fuzz"

func fuzzRequest() provider.Request {
	return provider.Request{
		SessionID: "s1",
		Model:     fuzzModel,
		APIKey:    "sk-fuzz",
		Context: []*messages.Entry{
			{Seq: 1, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: "hi"}}},
		},
		Tools: []provider.ToolSpec{{Name: "read_file", Description: "Read a file",
			SchemaJSON: `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`}},
	}
}

// runFuzzStream runs one Stream call against tr and checks the invariants
// every outcome must meet.
func runFuzzStream(t *testing.T, tr *providertest.CannedTransport) *messages.AssistantMessage {
	t.Helper()
	p := anthropic.New(anthropic.Config{
		BaseURL:    "http://fuzz.invalid",
		HTTPClient: &http.Client{Transport: tr},
	})
	m := providertest.Stream(t, p, fuzzRequest(), tr, anthropic.ProviderName, "/v1/messages")
	if m.GetTimestampMs() == 0 {
		t.Errorf("no timestamp")
	}
	return m
}

// Wire examples for the seeds (the shapes of stream_test.go and
// errors_test.go).

func sse(event, data string) string { return "event: " + event + "\ndata: " + data + "\n\n" }

func evMessageStart() string {
	return sse("message_start", `{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}`)
}

func evPing() string { return sse("ping", `{"type": "ping"}`) }

func evBlockStart(index int, block string) string {
	return sse("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":%s}`, index, block))
}

func evTextStart(index int) string { return evBlockStart(index, `{"type":"text","text":""}`) }

func evDelta(index int, delta string) string {
	return sse("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":%s}`, index, delta))
}

func evText(index int, text string) string {
	b, _ := json.Marshal(text)
	return evDelta(index, fmt.Sprintf(`{"type":"text_delta","text":%s}`, b))
}

func evBlockStop(index int) string {
	return sse("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, index))
}

func evMessageDelta(stopReason string) string {
	return sse("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":15}}`, stopReason))
}

func evMessageStop() string { return sse("message_stop", `{"type":"message_stop"}`) }

const overloadedEvent = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`

func textStream(stopReason string, texts ...string) string {
	evs := []string{evMessageStart(), evTextStart(0), evPing()}
	for _, t := range texts {
		evs = append(evs, evText(0, t))
	}
	return strings.Join(append(evs, evBlockStop(0), evMessageDelta(stopReason), evMessageStop()), "")
}

func messagesSeeds() []string {
	text := textStream("end_turn", "Hello", ", ", "world")
	thinking := strings.Join([]string{
		evMessageStart(),
		evBlockStart(0, `{"type":"thinking","thinking":"","signature":""}`),
		evDelta(0, `{"type":"thinking_delta","thinking":"Let me think"}`),
		evDelta(0, `{"type":"signature_delta","signature":"sig-abc=="}`),
		evBlockStop(0),
		evBlockStart(1, `{"type":"redacted_thinking","data":"ENCRYPTED"}`),
		evBlockStop(1),
		evTextStart(2), evText(2, "Answer."), evBlockStop(2),
		evMessageDelta("end_turn"), evMessageStop(),
	}, "")
	tool := strings.Join([]string{
		evMessageStart(),
		evTextStart(0), evText(0, "Reading."), evBlockStop(0),
		evBlockStart(1, `{"type":"tool_use","id":"toolu_01","name":"read_file","input":{}}`),
		evDelta(1, `{"type":"input_json_delta","partial_json":""}`),
		evDelta(1, `{"type":"input_json_delta","partial_json":"{\"path\": "}`),
		evDelta(1, `{"type":"input_json_delta","partial_json":"\"a.txt\"}"}`),
		evBlockStop(1),
		evBlockStart(2, `{"type":"tool_use","id":"toolu_02","name":"list","input":{"a":1}}`),
		evBlockStop(2),
		evMessageDelta("tool_use"), evMessageStop(),
	}, "")
	return []string{
		text,
		thinking,
		tool,
		textStream("max_tokens", "partial"),
		textStream("model_context_window_exceeded", "partial"),
		textStream("stop_sequence"),
		textStream("something_new", "x"),
		textStream("refusal"),
		evMessageStart() + evTextStart(0) + evText(0, "I can start with") + evBlockStop(0) +
			sse("message_delta", `{"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null,"stop_details":{"type":"refusal","category":"cyber","explanation":"This request could enable malware development."}},"usage":{"output_tokens":5}}`) +
			evMessageStop(),
		// Error events.
		sse("error", overloadedEvent),
		evMessageStart() + evTextStart(0) + evText(0, "Half an ans") + sse("error", overloadedEvent),
		evMessageStart() + evTextStart(0) + sse("error", overloadedEvent),
		sse("error", `{"error":"upstream"}`),
		sse("error", `{"message":5}`),
		sse("error", ``),
		sse("error", `not json`),
		// Truncated.
		text[:len(text)/2],
		tool[:len(tool)-25],
		evMessageStart() + evTextStart(0) + evText(0, "cut"),
		evMessageStart(),
		evMessageStart() + evPing(),
		strings.TrimSuffix(text, evMessageStop()),
		strings.TrimSuffix(text, "\n\n"),
		// Odd but well-framed.
		": a comment\n\n" + evMessageStart() + sse("mystery", `{"type":"mystery","x":1}`) + evText(7, "no such block") +
			evBlockStart(0, `{"type":"server_tool_use","id":"srv_1","name":"web_search","input":{}}`) +
			evDelta(0, `{"type":"input_json_delta","partial_json":"{}"}`) + evBlockStop(0) +
			evTextStart(1) + evDelta(1, `{"type":"input_json_delta","partial_json":"{}"}`) +
			evDelta(1, `{"type":"citations_delta","citation":{}}`) + evText(1, "fine") + evBlockStop(1) +
			evMessageDelta("end_turn") + evMessageStop(),
		strings.ReplaceAll(text, "\n", "\r\n"),
		evBlockStart(0, `{"type":"tool_use","id":"t","name":"f","input":null}`) + evMessageDelta("tool_use"),
		evBlockStart(0, `{"type":"text","text":"started"}`) + evBlockStart(0, `{"type":"thinking","thinking":"again"}`) +
			evDelta(0, `{"type":"thinking_delta","thinking":"more"}`) + evMessageDelta("tool_use"),
		sse("message_delta", `{"type":"message_delta","delta":{"stop_reason":"refusal","stop_details":null}}`),
		sse("message_delta", `{"type":"message_delta","delta":{"stop_reason":5,"stop_details":"x"}}`),
		sse("content_block_start", `{"type":"content_block_start","index":-1,"content_block":{"type":"text","text":7}}`),
		"data: " + `{"type":"message_start"}` + "\n\n",
		sse("message_stop", `{"type":"message_stop"}`),
		// Garbage.
		"",
		"\n\n\n",
		evMessageStart() + sse("content_block_delta", `{not json`),
		`{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}]}`,
		"<html><body>bad gateway</body></html>",
		"event: \xff\ndata: \xfe\x00\n\n",
	}
}

// FuzzMessagesStream gives the Messages stream an arbitrary body with
// status 200 and Content-Type text/event-stream.
func FuzzMessagesStream(f *testing.F) {
	for _, s := range messagesSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		tr := &providertest.CannedTransport{Status: http.StatusOK, ContentType: "text/event-stream", Body: body, RequestIDHeader: "Request-Id"}
		runFuzzStream(t, tr)
	})
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

// FuzzMessagesStreamStatus is FuzzMessagesStream with any status (100-599)
// and a choice of Content-Type: the error path. An HTTP error must give an
// ERROR message keeping the status and the headers.
func FuzzMessagesStreamStatus(f *testing.F) {
	streams := messagesSeeds()
	for _, s := range []struct {
		status int
		ct     uint8
		body   string
	}{
		{529, 1, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_err"}`},
		{429, 1, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`},
		{400, 1, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 213462 tokens > 200000 maximum"}}`},
		{401, 1, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`},
		{500, 1, `{"error":"upstream exploded"}`},
		{429, 1, `{"message":"slow down"}`},
		{503, 1, `{"type":"error","error":{"type":5,"message":{"x":1}}}`},
		{502, 2, "<html><body>upstream connect error or disconnect/reset before headers</body></html>"},
		{503, 3, " "},
		{504, 5, ""},
		{599, 1, "{not json"},
		{404, 1, "[]"},
		{413, 1, strings.Repeat("x", 5000)},
		{200, 1, `{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}]}`},
		{204, 3, ""},
		{301, 5, "moved"},
		{304, 0, ""},
		{101, 0, ""},
		{100, 4, streams[0]},
		{207, 0, streams[0]},
		{500, 0, streams[0]},
		{200, 4, streams[2]},
		{200, 2, streams[0]},
	} {
		f.Add(s.status, s.ct, s.body)
	}
	f.Fuzz(func(t *testing.T, status int, ct uint8, body string) {
		status = fuzzStatus(status)
		tr := &providertest.CannedTransport{Status: status, ContentType: providertest.ContentTypes[int(ct)%len(providertest.ContentTypes)], Body: body, RequestIDHeader: "Request-Id"}
		m := runFuzzStream(t, tr)
		if status < 400 {
			return
		}
		if m.GetStopReason() != messages.StopReason_STOP_REASON_ERROR {
			t.Fatalf("HTTP %d gave stop reason %v", status, m.GetStopReason())
		}
		if int(m.GetHttpStatus()) != status {
			t.Errorf("HTTP %d kept as status %d", status, m.GetHttpStatus())
		}
		if m.GetHeaders()["request-id"] != "req_fuzz" {
			t.Errorf("HTTP %d headers %v", status, m.GetHeaders())
		}
		if !strings.HasPrefix(m.GetErrorMessage(), fmt.Sprint(status)) {
			t.Errorf("HTTP %d error text %q", status, m.GetErrorMessage())
		}
	})
}
