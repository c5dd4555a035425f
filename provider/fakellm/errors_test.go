package fakellm

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// wantErr is an error as the client sees it.
type wantErr struct {
	status int
	typ    string
	code   string // OpenAI only; "" means null
	msg    string // substring
}

// presetTable is every preset as each API family renders it, and the class
// the retry policy gives it.
var presetTable = []struct {
	preset    string
	anthropic wantErr
	openai    wantErr
	responses *wantErr // when it differs from chat
	class     retry.Class
}{
	{"rate_limit",
		wantErr{429, "rate_limit_error", "", "rate limit"},
		wantErr{429, "requests", "rate_limit_exceeded", "Rate limit reached for m "}, nil,
		retry.Transient},
	{"overloaded",
		wantErr{529, "overloaded_error", "", "Overloaded"},
		wantErr{503, "server_error", "", "The server is overloaded"}, nil,
		retry.Transient},
	{"server_error",
		wantErr{500, "api_error", "", "Internal server error"},
		wantErr{500, "server_error", "", "The server had an error while processing your request"}, nil,
		retry.Transient},
	{"bad_gateway",
		wantErr{502, "api_error", "", "Bad gateway"},
		wantErr{502, "server_error", "", "Bad gateway"}, nil,
		retry.Transient},
	{"unavailable",
		wantErr{503, "api_error", "", "Service unavailable"},
		wantErr{503, "server_error", "", "Service unavailable"}, nil,
		retry.Transient},
	{"gateway_timeout",
		wantErr{504, "timeout_error", "", "timed out"},
		wantErr{504, "server_error", "", "Gateway timeout"}, nil,
		retry.Transient},
	{"quota",
		wantErr{402, "billing_error", "", "Your credit balance is too low"},
		wantErr{429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details."}, nil,
		retry.UsageLimit},
	{"usage_limit",
		wantErr{429, "rate_limit_error", "", "usage limit reached"},
		wantErr{429, "usage_limit_reached", "usage_limit_reached", "The usage limit has been reached"}, nil,
		retry.UsageLimit},
	{"context_overflow",
		wantErr{400, "invalid_request_error", "", "prompt is too long: 213462 tokens > 200000 maximum"},
		wantErr{400, "invalid_request_error", "context_length_exceeded", "This model's maximum context length is 128000 tokens. However, your messages resulted in 130500 tokens."},
		&wantErr{400, "invalid_request_error", "context_length_exceeded", "exceeds the context window"},
		retry.ContextOverflow},
	{"auth",
		wantErr{401, "authentication_error", "", "invalid x-api-key"},
		wantErr{401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided: ********. You can find your API key"}, nil,
		retry.NotRetryable},
	{"stale_response",
		wantErr{400, "invalid_request_error", "", "Previous response with id 'resp_unknown' not found."},
		wantErr{400, "invalid_request_error", "previous_response_not_found", "Previous response with id 'resp_unknown' not found."}, nil,
		retry.StaleReplay},
}

// checkError checks an HTTP error in the API's real shape and returns its
// message.
func checkError(t *testing.T, api string, res result, want wantErr) string {
	t.Helper()
	if res.status != want.status {
		t.Errorf("status %d, want %d (%s)", res.status, want.status, res.body)
	}
	if ct := res.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	m := decode(t, res.body)
	var msg string
	if api == APIAnthropic {
		if str(m, "type") != "error" || str(m, "error", "type") != want.typ || !strings.HasPrefix(str(m, "request_id"), "req_") {
			t.Errorf("anthropic error body %s", res.body)
		}
		if res.header.Get("Request-Id") != str(m, "request_id") {
			t.Errorf("request-id header %q, body %q", res.header.Get("Request-Id"), str(m, "request_id"))
		}
		msg = str(m, "error", "message")
	} else {
		e, ok := m["error"].(map[string]any)
		if !ok {
			t.Fatalf("openai error body %s", res.body)
		}
		for _, k := range []string{"message", "type", "param", "code"} {
			if _, ok := e[k]; !ok {
				t.Errorf("error.%s missing: %s", k, res.body)
			}
		}
		if str(e, "type") != want.typ {
			t.Errorf("type %q, want %q", str(e, "type"), want.typ)
		}
		if want.code == "" && e["code"] != nil || want.code != "" && str(e, "code") != want.code {
			t.Errorf("code %v, want %q", e["code"], want.code)
		}
		if res.header.Get("X-Request-Id") == "" {
			t.Errorf("no x-request-id")
		}
		msg = str(e, "message")
	}
	if !strings.Contains(msg, want.msg) {
		t.Errorf("message %q, want it to contain %q", msg, want.msg)
	}
	return msg
}

func TestPresets(t *testing.T) {
	var rules []string
	for _, p := range presetTable {
		rules = append(rules, fmt.Sprintf(`{"name": %q, "match": {"model": %q},
			"respond": {"preset": %q, "headers": {"retry-after": "7", "x-ratelimit-reset-ms": "1500"}}}`, p.preset, p.preset, p.preset))
	}
	ts := startJSON(t, `{"rules": [`+strings.Join(rules, ",")+`]}`)
	for _, p := range presetTable {
		for _, api := range apis {
			t.Run(p.preset+"/"+api, func(t *testing.T) {
				want := p.openai
				switch {
				case api == APIAnthropic:
					want = p.anthropic
				case api == APIOpenAIResponses && p.responses != nil:
					want = *p.responses
				}
				// The {model} in the rate-limit text: the rule matches on the
				// model, so rename it for that check.
				want.msg = strings.ReplaceAll(want.msg, "for m ", "for "+p.preset+" ")
				res := ts.call(req{api: api, model: p.preset, stream: true})
				msg := checkError(t, api, res, want)
				if res.header.Get("Retry-After") != "7" || res.header.Get("X-Ratelimit-Reset-Ms") != "1500" {
					t.Errorf("hint headers: %v", res.header)
				}
				// The retry policy classifies the preset as intended.
				am := &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR,
					ErrorMessage: strconv.Itoa(res.status) + " " + msg, HttpStatus: int32(res.status)}
				if got := retry.Classify(am, retry.AbortState{}); got != p.class {
					t.Errorf("retry.Classify(%q) = %v, want %v", am.ErrorMessage, got, p.class)
				}
			})
		}
	}
}

func TestExplicitErrorFields(t *testing.T) {
	ts := startJSON(t, `{"rules": [
		{"match": {"model": "custom"}, "respond": {"status": 429, "headers": {"retry-after": "3"},
			"error_type": "rate_limit_error", "message": "Rate limited"}},
		{"match": {"model": "override"}, "respond": {"preset": "overloaded", "message": "Still overloaded for {model}"}},
		{"match": {"model": "bare"}, "respond": {"status": 413}}]}`)
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			typ := "rate_limit_error"
			res := ts.call(req{api: api, model: "custom", stream: true})
			checkError(t, api, res, wantErr{429, typ, "", "Rate limited"})
			if res.header.Get("Retry-After") != "3" {
				t.Errorf("retry-after %q", res.header.Get("Retry-After"))
			}
			res = ts.call(req{api: api, model: "override", stream: true})
			if api == APIAnthropic {
				checkError(t, api, res, wantErr{529, "overloaded_error", "", "Still overloaded for override"})
			} else {
				checkError(t, api, res, wantErr{503, "server_error", "", "Still overloaded for override"})
			}
			res = ts.call(req{api: api, model: "bare", stream: true})
			if api == APIAnthropic {
				checkError(t, api, res, wantErr{413, "request_too_large", "", "Request Entity Too Large"})
			} else {
				checkError(t, api, res, wantErr{413, "invalid_request_error", "", "Request Entity Too Large"})
			}
		})
	}
}

func TestStreamError(t *testing.T) {
	ts := startJSON(t, `{"rules": [
		{"match": {"model": "default"}, "respond": {"stream_error": true}},
		{"match": {"model": "custom"}, "respond": {"stream_error": true, "error_type": "api_error", "message": "Internal server error"}}]}`)

	t.Run("anthropic error before message_start", func(t *testing.T) {
		res := ts.call(req{api: APIAnthropic, model: "default", stream: true})
		if res.status != 200 || res.readErr != nil {
			t.Fatalf("status %d err %v", res.status, res.readErr)
		}
		equal(t, "events", names(res.events), []string{"error"})
		m := res.events[0].json(t)
		if str(m, "type") != "error" || str(m, "error", "type") != "overloaded_error" || str(m, "error", "message") != "Overloaded" {
			t.Errorf("error event %s", res.events[0].Data)
		}
		res = ts.call(req{api: APIAnthropic, model: "custom", stream: true})
		if m := res.events[0].json(t); str(m, "error", "type") != "api_error" || str(m, "error", "message") != "Internal server error" {
			t.Errorf("error event %s", res.events[0].Data)
		}
	})
	t.Run("chat error chunk", func(t *testing.T) {
		res := ts.call(req{api: APIOpenAIChat, model: "default", stream: true})
		if res.status != 200 || len(res.events) != 1 {
			t.Fatalf("status %d events %q", res.status, namesData(res.events))
		}
		if m := res.events[0].json(t); str(m, "error", "type") != "server_error" || str(m, "error", "message") == "" {
			t.Errorf("error chunk %s", res.events[0].Data)
		}
	})
	t.Run("responses error event", func(t *testing.T) {
		res := ts.call(req{api: APIOpenAIResponses, model: "custom", stream: true})
		equal(t, "events", names(res.events), []string{"error"})
		m := res.events[0].json(t)
		if str(m, "type") != "error" || str(m, "code") != "api_error" || str(m, "message") != "Internal server error" ||
			walk(m, "sequence_number") != 0.0 {
			t.Errorf("error event %s", res.events[0].Data)
		}
	})
	t.Run("non-streaming request gets an HTTP error", func(t *testing.T) {
		checkError(t, APIAnthropic, ts.call(req{api: APIAnthropic, model: "default"}), wantErr{529, "overloaded_error", "", "Overloaded"})
		checkError(t, APIOpenAIChat, ts.call(req{api: APIOpenAIChat, model: "custom"}), wantErr{500, "api_error", "", "Internal server error"})
	})
}

func TestRequestChecks(t *testing.T) {
	ts := start(t, nil)
	post := func(path, body string, headers ...string) result {
		t.Helper()
		r := req{api: APIOpenAIChat}.httpRequest(t, ts.base)
		r.URL.Path = path
		r.Body = nopCloser(body)
		r.ContentLength = int64(len(body))
		r.Header = map[string][]string{}
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		resp, err := ts.client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		res := result{status: resp.StatusCode, header: resp.Header}
		res.body = readAll(t, resp)
		return res
	}
	checkError(t, APIOpenAIChat, post("/v1/chat/completions", `{"model":"m"}`),
		wantErr{401, "invalid_request_error", "", "You didn't provide an API key"})
	checkError(t, APIAnthropic, post("/v1/messages", `{"model":"m","max_tokens":1}`, "anthropic-version", "2023-06-01"),
		wantErr{401, "authentication_error", "", "x-api-key header is required"})
	checkError(t, APIAnthropic, post("/v1/messages", `{"model":"m","max_tokens":1}`, "x-api-key", "k"),
		wantErr{400, "invalid_request_error", "", "anthropic-version: header is required"})
	checkError(t, APIAnthropic, post("/v1/messages", `{"model":"m"}`, "x-api-key", "k", "anthropic-version", "2023-06-01"),
		wantErr{400, "invalid_request_error", "", "max_tokens: Field required"})
	checkError(t, APIOpenAIResponses, post("/v1/responses", `{"input":"hi"}`, "Authorization", "Bearer k"),
		wantErr{400, "invalid_request_error", "", "you must provide a model parameter"})
	checkError(t, APIOpenAIChat, post("/v1/chat/completions", `{"model":`, "Authorization", "Bearer k"),
		wantErr{400, "invalid_request_error", "", "We could not parse the JSON body"})
	checkError(t, APIOpenAIChat, post("/v1/nope", `{}`, "Authorization", "Bearer k"),
		wantErr{404, "invalid_request_error", "unknown_url", "Unknown request URL: POST /v1/nope."})
	// Anthropic also takes a bearer token.
	if res := post("/v1/messages", `{"model":"m","max_tokens":1}`, "Authorization", "Bearer k", "anthropic-version", "2023-06-01"); res.status != 200 {
		t.Errorf("bearer on anthropic: %d %s", res.status, res.body)
	}
	if st := ts.srv.Stats(); st.ByRule[labelInvalid] != 6 || st.ByStatus["401"] != 2 {
		t.Errorf("stats of rejected requests: %+v", st)
	}
}
