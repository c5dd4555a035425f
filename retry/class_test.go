package retry

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/messages"
)

// Tests for section 2 of the retry policy ("Classification") and the
// overflow wordings of section 1. Each family has a table of realistic
// provider error texts (OpenAI, Anthropic, Gemini, Node and Go network
// wordings) with positive and negative rows.

// ---- message builders ----

// errMsg is a failed turn: stop_reason error, the provider's error text and
// (0 when none) the HTTP status.
func errMsg(text string, status int) *messages.AssistantMessage {
	return &messages.AssistantMessage{
		StopReason:   messages.StopReason_STOP_REASON_ERROR,
		ErrorMessage: text,
		HttpStatus:   int32(status),
	}
}

// stopMsg is a turn that ended with the given stop reason and error text.
func stopMsg(reason messages.StopReason, text string) *messages.AssistantMessage {
	return &messages.AssistantMessage{StopReason: reason, ErrorMessage: text}
}

// withDetails sets stop_details.type on m and returns m.
func withDetails(m *messages.AssistantMessage, typ string) *messages.AssistantMessage {
	m.StopDetails = &messages.StopDetails{Type: typ}
	return m
}

// withBlocks appends content blocks to m and returns m.
func withBlocks(m *messages.AssistantMessage, blocks ...*messages.ContentBlock) *messages.AssistantMessage {
	m.Content = append(m.Content, blocks...)
	return m
}

func textBlock(s string) *messages.ContentBlock {
	return &messages.ContentBlock{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: s}}}
}

func thinkingBlock(s, sig string) *messages.ContentBlock {
	return &messages.ContentBlock{Block: &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{Thinking: s, Signature: sig}}}
}

func redactedBlock(data string) *messages.ContentBlock {
	return &messages.ContentBlock{Block: &messages.ContentBlock_RedactedThinking{RedactedThinking: &messages.RedactedThinkingBlock{Data: data}}}
}

func toolCallBlock(id, name, args string) *messages.ContentBlock {
	return &messages.ContentBlock{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: id, Name: name, ArgumentsJson: args}}}
}

// classCase is one row of a classification table.
type classCase struct {
	name   string
	msg    *messages.AssistantMessage
	aborts AbortState
	want   Class
}

func runClassCases(t *testing.T, cases []classCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.msg, tc.aborts); got != tc.want {
				t.Errorf("Classify(%q, status %d, stop %v, details %q, %d blocks, %+v) = %v, want %v",
					tc.msg.GetErrorMessage(), tc.msg.GetHttpStatus(), tc.msg.GetStopReason(),
					tc.msg.GetStopDetails().GetType(), len(tc.msg.GetContent()), tc.aborts, got, tc.want)
			}
		})
	}
}

// ---- section 1: context overflow ----

func contextOverflowCases() []classCase {
	return []classCase{
		// Positive: every overflow wording of section 1.
		{name: "anthropic prompt is too long", want: ContextOverflow,
			msg: errMsg(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 213462 tokens > 200000 maximum"}}`, 400)},
		{name: "anthropic prompt is too long without status", want: ContextOverflow,
			msg: errMsg("prompt is too long: 213462 tokens > 200000 maximum", 0)},
		{name: "openai maximum context length", want: ContextOverflow,
			msg: errMsg("This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. Please reduce the length of the messages.", 400)},
		{name: "context length exceeded in words", want: ContextOverflow,
			msg: errMsg("Context length exceeded: 33012 > 32768 tokens", 0)},
		{name: "openai context_length_exceeded code", want: ContextOverflow,
			msg: errMsg(`Error code: 400 - {'error': {'message': 'Please reduce the length of the messages or completion.', 'type': 'invalid_request_error', 'param': 'messages', 'code': 'context_length_exceeded'}}`, 0)},
		{name: "too many tokens", want: ContextOverflow,
			msg: errMsg("input has too many tokens for this model: 140512 > 131072", 400)},
		{name: "openai responses exceeds the context window (try again is ignored)", want: ContextOverflow,
			msg: errMsg("Your input exceeds the context window of this model. Please adjust your input and try again.", 400)},
		{name: "exceeds the model's context window", want: ContextOverflow,
			msg: errMsg("The conversation exceeds the model's context window.", 0)},
		{name: "bedrock input is too long", want: ContextOverflow,
			msg: errMsg("ValidationException: Input is too long for requested model.", 400)},
		{name: "request too large for the model window", want: ContextOverflow,
			msg: errMsg("Request too large for the model's context window: 215000 tokens requested, 200000 allowed.", 0)},
		{name: "gemini 400 input token count exceeds maximum", want: ContextOverflow,
			msg: errMsg(`{"error":{"code":400,"message":"The input token count (1196265) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`, 400)},
		{name: "gemini 400 body with status only in the text", want: ContextOverflow,
			msg: errMsg(`{"error":{"code":400,"message":"The input token count (1196265) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`, 0)},
		{name: "llama.cpp 400 request exceeds available context", want: ContextOverflow,
			msg: errMsg("the request exceeds the available context size, try increasing it", 400)},
		{name: "anthropic 413 request exceeds the maximum size", want: ContextOverflow,
			msg: errMsg(`{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}`, 413)},
		{name: "413 input exceeds model limit", want: ContextOverflow,
			msg: errMsg("input length exceeds the model limit", 413)},

		// Order: overflow is checked before any transient pattern.
		{name: "130500 tokens does not match 500", want: ContextOverflow,
			msg: errMsg("This model's maximum context length is 128000 tokens. However, your messages resulted in 130500 tokens. Please reduce the length of the messages.", 0)},
		{name: "200503 tokens does not match 503", want: ContextOverflow,
			msg: errMsg("prompt is too long: 200503 tokens > 200000 maximum", 0)},
		{name: "overflow text on a 500 is still overflow", want: ContextOverflow,
			msg: errMsg("upstream error: This model's maximum context length is 8192 tokens", 500)},
		{name: "overflow wins over usage limit wording", want: ContextOverflow,
			msg: errMsg("prompt is too long (usage limit for prompts is 200000 tokens)", 0)},
		{name: "overflow wins over observable output (not a retry class)", want: ContextOverflow,
			msg: withBlocks(errMsg("prompt is too long: 213462 tokens > 200000 maximum", 400), textBlock("partial"))},

		// Negative: OpenAI's tokens-per-minute "Request too large" is a rate limit.
		{name: "openai TPM request too large on 429", want: Transient,
			msg: errMsg("Request too large for gpt-4o in organization org-AbCdEfGh on tokens per min (TPM): Limit 30000, Requested 36000. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.", 429)},
		{name: "openai TPM request too large full body", want: Transient,
			msg: errMsg(`{"error":{"message":"Request too large for gpt-4o in organization org-AbCdEfGh on tokens per min (TPM): Limit 30000, Requested 36000. The input or output tokens must be reduced in order to run successfully.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`, 0)},
		{name: "groq TPM request too large per minute", want: Transient,
			msg: errMsg("Request too large for model `llama-3.3-70b-versatile` in organization `org_abcdef` service tier `on_demand` on tokens per minute (TPM): Limit 12000, Requested 15000, please reduce your message size and try again.", 413)},
		{name: "anthropic 429 would exceed the rate limit of input tokens", want: Transient,
			msg: errMsg(`{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (abcd-ef) of 30,000 input tokens per minute."}}`, 429)},
		{name: "openrouter 402 requires more credits is a usage limit", want: UsageLimit,
			msg: errMsg("This request requires more credits, or fewer max_tokens. You requested up to 4096 tokens, but can only afford 1000.", 402)},
		{name: "openai exceeded your current quota is a usage limit", want: UsageLimit,
			msg: errMsg("You exceeded your current quota, please check your plan and billing details.", 429)},
		{name: "anthropic max_tokens above the output limit is a bad request", want: NotRetryable,
			msg: errMsg(`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 128000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-20250514"}}`, 400)},
		{name: "exceeds on a 401 is not overflow", want: NotRetryable,
			msg: errMsg("token exceeds the maximum age; please log in again", 401)},
		{name: "caller cancellation", want: NotRetryable,
			msg: errMsg("context canceled", 0)},
	}
}

func TestClassifyContextOverflow(t *testing.T) {
	runClassCases(t, contextOverflowCases())
}

func TestIsContextOverflow(t *testing.T) {
	for _, tc := range contextOverflowCases() {
		if got, want := IsContextOverflow(tc.msg), tc.want == ContextOverflow; got != want {
			t.Errorf("%s: IsContextOverflow = %v, want %v", tc.name, got, want)
		}
	}
	if IsContextOverflow(nil) {
		t.Error("IsContextOverflow(nil) = true")
	}
}

// ---- section 2, class 1: classifier refusal ----

func classifierRefusalCases() []classCase {
	const anthropicRefusal = "Anthropic stop_reason refusal: the request appears to violate the Usage Policy (https://www.anthropic.com/legal/aup)."
	const openaiFiltered = "OpenAI finish_reason content_filter: the response was filtered by the content management policy."
	return []classCase{
		// Positive: the typed field decides.
		{name: "anthropic refusal", want: ClassifierRefusal,
			msg: withDetails(errMsg(anthropicRefusal, 0), StopDetailRefusal)},
		{name: "openai content_filter maps to sensitive", want: ClassifierRefusal,
			msg: withDetails(errMsg(openaiFiltered, 0), StopDetailSensitive)},
		{name: "refusal with text already streamed", want: ClassifierRefusal,
			msg: withBlocks(withDetails(errMsg(anthropicRefusal, 0), StopDetailRefusal), textBlock("Sure, here is how to"))},
		{name: "refusal with a tool call already streamed", want: ClassifierRefusal,
			msg: withBlocks(withDetails(errMsg(anthropicRefusal, 0), StopDetailRefusal),
				textBlock("Let me look."), toolCallBlock("toolu_01", "bash", `{"command":"ls"}`))},
		{name: "sensitive with thinking and redacted thinking", want: ClassifierRefusal,
			msg: withBlocks(withDetails(errMsg(openaiFiltered, 0), StopDetailSensitive),
				thinkingBlock("The user wants", "sig"), redactedBlock("EmwKAhgBEgy..."))},
		{name: "refusal checked before transient wording", want: ClassifierRefusal,
			msg: withDetails(errMsg("503 Service Unavailable", 503), StopDetailRefusal)},
		{name: "refusal checked before usage limit wording", want: ClassifierRefusal,
			msg: withDetails(errMsg("usage limit policy: request refused", 0), StopDetailRefusal)},
		{name: "refusal checked before stale replay wording", want: ClassifierRefusal,
			msg: withDetails(errMsg("Item with id 'rs_1' not found.", 0), StopDetailSensitive)},

		// Negative: refusal wording without the typed field is not a refusal.
		{name: "refusal only in the text", want: NotRetryable,
			msg: errMsg("The model returned stop_reason: refusal", 0)},
		{name: "content_filter only in the text", want: NotRetryable,
			msg: errMsg(openaiFiltered, 0)},
		{name: "stop detail type in the text does not count", want: NotRetryable,
			msg: errMsg(`stop_details: {"type":"sensitive"}`, 0)},
		{name: "refusal without error_message", want: NotRetryable,
			msg: withDetails(errMsg("", 0), StopDetailRefusal)},
		{name: "refusal detail on a successful turn", want: Success,
			msg: withDetails(stopMsg(messages.StopReason_STOP_REASON_STOP, ""), StopDetailRefusal)},
		{name: "other stop detail types classify by text", want: Transient,
			msg: withDetails(errMsg("Overloaded", 529), "pause_turn")},
		{name: "stream_interrupted_after_content is not a refusal", want: NotRetryable,
			msg: withDetails(errMsg("Overloaded", 529), StopDetailStreamInterruptedAfterContent)},
	}
}

func TestClassifyClassifierRefusal(t *testing.T) {
	runClassCases(t, classifierRefusalCases())
}

// ---- section 2, class 2: stale replay ----

func staleReplayCases() []classCase {
	return []classCase{
		{name: "openai item not found", want: StaleReplay,
			msg: errMsg("Item with id 'rs_123' not found.", 404)},
		{name: "openai item not found with store hint (try again ignored)", want: StaleReplay,
			msg: errMsg("Item with id 'rs_68a1b2c3d4e5f6' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input.", 400)},
		{name: "previous response not found", want: StaleReplay,
			msg: errMsg("Previous response with id 'resp_1' not found.", 400)},
		{name: "previous response not found full body", want: StaleReplay,
			msg: errMsg(`{"error":{"message":"Previous response with id 'resp_abc' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}`, 0)},
		{name: "invalid previous_response_id", want: StaleReplay,
			msg: errMsg("Invalid 'previous_response_id': 'resp_xyz'. Expected an ID that begins with 'resp'.", 400)},
		{name: "expired previous_response_id", want: StaleReplay,
			msg: errMsg("The previous_response_id 'resp_abc' has expired.", 400)},
		{name: "previous_response_id does not exist", want: StaleReplay,
			msg: errMsg("previous_response_id resp_abc does not exist", 0)},

		// Negative.
		{name: "openai 404 model does not exist", want: NotRetryable,
			msg: errMsg(`{"error":{"message":"The model 'gpt-9' does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`, 404)},
		{name: "404 model not found", want: NotRetryable,
			msg: errMsg("model not found", 404)},
		{name: "anthropic 404 not_found_error", want: NotRetryable,
			msg: errMsg(`{"type":"error","error":{"type":"not_found_error","message":"model: claude-opus-nine"}}`, 404)},
		{name: "file not found is not a replayed item", want: NotRetryable,
			msg: errMsg("No such File object: file-abc", 404)},
		{name: "previous_response_id unsupported", want: NotRetryable,
			msg: errMsg("Unsupported parameter: 'previous_response_id' is not supported with this model.", 400)},
		{name: "item id without not found", want: NotRetryable,
			msg: errMsg("Item with id 'fc_1' has an invalid type.", 400)},
	}
}

func TestClassifyStaleReplay(t *testing.T) {
	runClassCases(t, staleReplayCases())
}

// ---- section 2, class 3: usage limit ----

func usageLimitCases() []classCase {
	return []classCase{
		{name: "codex usage_limit_reached body", want: UsageLimit,
			msg: errMsg(`{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","plan_type":"plus","resets_in_seconds":3600}}`, 429)},
		{name: "usage limit wording (try again ignored)", want: UsageLimit,
			msg: errMsg("You've hit your usage limit. Upgrade to Pro or try again in 2h 13m.", 0)},
		{name: "limit_reached type", want: UsageLimit,
			msg: errMsg(`{"type":"error","error":{"type":"limit_reached","message":"Weekly limit reached"}}`, 0)},
		{name: "gemini quota exceeded for metric", want: UsageLimit,
			msg: errMsg("Quota exceeded for quota metric 'Generate Content API requests per minute' and limit 'GenerateContent request limit per minute for a region' of service 'generativelanguage.googleapis.com'", 0)},
		{name: "quota reached", want: UsageLimit,
			msg: errMsg("Daily quota reached for this API key.", 0)},
		{name: "openai insufficient_quota", want: UsageLimit,
			msg: errMsg(`{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, 429)},
		{name: "vertex resource exhausted (try again ignored)", want: UsageLimit,
			msg: errMsg("Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.", 429)},
		{name: "gemini RESOURCE_EXHAUSTED status", want: UsageLimit,
			msg: errMsg(`{"error":{"code":429,"message":"Too many requests, please slow down.","status":"RESOURCE_EXHAUSTED"}}`, 0)},
		{name: "gemini cli exhausted your capacity", want: UsageLimit,
			msg: errMsg("You have exhausted your capacity on this model. Your quota will reset after 2h13m5s.", 0)},
		{name: "deepseek insufficient balance", want: UsageLimit,
			msg: errMsg(`{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}`, 402)},
		{name: "openai billing hard limit", want: UsageLimit,
			msg: errMsg("Billing hard limit has been reached", 400)},
		{name: "anthropic credit balance too low", want: UsageLimit,
			msg: errMsg(`{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}`, 400)},
		{name: "credit limit", want: UsageLimit,
			msg: errMsg("You have reached your monthly credit limit.", 0)},
		{name: "openrouter insufficient credits", want: UsageLimit,
			msg: errMsg("Insufficient credits. Add more using https://openrouter.ai/settings/credits", 402)},
		{name: "429 whose body says quota", want: UsageLimit,
			msg: errMsg("Requests for this project have used up the daily quota.", 429)},
		{name: "402 whose body says quota", want: UsageLimit,
			msg: errMsg("Payment required: monthly quota used up", 402)},
		{name: "429 in the text with a quota body", want: UsageLimit,
			msg: errMsg("googleapi: Error 429: Resource has been exhausted (e.g. check quota)., rateLimitExceeded", 0)},
		{name: "usage limit checked before transient status", want: UsageLimit,
			msg: errMsg("usage_limit_reached", 503)},

		// Negative.
		{name: "plain rate limit is transient", want: Transient,
			msg: errMsg(`{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, 429)},
		{name: "quota word on a 400 without limit wording", want: NotRetryable,
			msg: errMsg("Invalid value for 'quota_project_id': must be a string.", 400)},
		{name: "402 without a quota body", want: NotRetryable,
			msg: errMsg("Payment Required", 402)},
		{name: "usage policy is not a usage limit", want: NotRetryable,
			msg: errMsg("This request appears to violate our Usage Policy.", 400)},
	}
}

func TestClassifyUsageLimit(t *testing.T) {
	runClassCases(t, usageLimitCases())
}

// ---- section 2, class 4: transient ----

func transientCases() []classCase {
	rows := []classCase{
		// Real wordings of the HTTP clients and providers in common use.
		{name: "bun socket closed unexpectedly", want: Transient,
			msg: errMsg("The socket connection was closed unexpectedly. For more information, pass `verbose: true` in the second argument to fetch()", 0)},
		{name: "bun ConnectionRefused code", want: Transient, msg: errMsg("ConnectionRefused: Unable to connect. Is the computer able to access the url?", 0)},
		{name: "bun FailedToOpenSocket", want: Transient, msg: errMsg("FailedToOpenSocket: Was there a typo in the url or port?", 0)},
		{name: "bun ConnectionClosed", want: Transient, msg: errMsg("error: ConnectionClosed", 0)},
		{name: "undici socket error", want: Transient, msg: errMsg("SocketError: other side closed (UND_ERR_SOCKET)", 0)},
		{name: "undici headers timeout", want: Transient, msg: errMsg("HeadersTimeoutError: Headers Timeout Error (UND_ERR_HEADERS_TIMEOUT)", 0)},
		{name: "node TLS socket disconnected", want: Transient,
			msg: errMsg("Client network socket disconnected before secure TLS connection was established", 0)},
		{name: "node premature close", want: Transient, msg: errMsg("Premature close", 0)},
		{name: "node ECONNABORTED", want: Transient, msg: errMsg("connect ECONNABORTED 10.0.0.1:443", 0)},
		{name: "node EHOSTUNREACH", want: Transient, msg: errMsg("connect EHOSTUNREACH 10.0.0.1:443", 0)},
		{name: "go http2 GOAWAY", want: Transient,
			msg: errMsg("http2: server sent GOAWAY and closed the connection; LastStreamID=1999, ErrCode=NO_ERROR, debug=\"\"", 0)},
		{name: "go http2 REFUSED_STREAM", want: Transient, msg: errMsg("stream error: stream ID 7; REFUSED_STREAM", 0)},
		{name: "go closed network connection", want: Transient,
			msg: errMsg("read tcp 127.0.0.1:50000->127.0.0.1:443: use of closed network connection", 0)},
		{name: "go no route to host", want: Transient, msg: errMsg("dial tcp 10.1.2.3:443: connect: no route to host", 0)},
		{name: "go network is unreachable", want: Transient, msg: errMsg("dial tcp [2001:db8::1]:443: connect: network is unreachable", 0)},
		{name: "go DNS server misbehaving", want: Transient, msg: errMsg("dial tcp: lookup api.openai.com on 127.0.0.53:53: server misbehaving", 0)},
		{name: "go DNS temporary failure", want: Transient,
			msg: errMsg("dial tcp: lookup api.anthropic.com: Temporary failure in name resolution", 0)},
		{name: "go TLS handshake timeout", want: Transient, msg: errMsg("net/http: TLS handshake timeout", 0)},
		{name: "httpx server disconnected", want: Transient, msg: errMsg("Server disconnected without sending a response.", 0)},
		{name: "httpx peer closed connection", want: Transient,
			msg: errMsg("RemoteProtocolError: peer closed connection without sending complete message body (incomplete chunked read)", 0)},
		{name: "aiohttp payload not completed", want: Transient,
			msg: errMsg("ClientPayloadError: Response payload is not completed: <TransferEncodingError: 400, message='Not enough data for satisfy transfer length header.'>", 0)},
		{name: "aiohttp cannot connect", want: Transient,
			msg: errMsg("Cannot connect to host api.example.com:443 ssl:default [Connect call failed ('10.0.0.1', 443)]", 0)},
		{name: "bedrock try your request again", want: Transient,
			msg: errMsg("The system encountered an unexpected error during processing. Try your request again.", 0)},
		{name: "bedrock throttling", want: Transient,
			msg: errMsg("ThrottlingException: Too many requests, please wait before trying again.", 429)},
		{name: "bedrock too many tokens is throttling, not overflow", want: Transient,
			msg: errMsg("ThrottlingException: Too many tokens, please wait before trying again.", 429)},
		{name: "bedrock service unavailable exception", want: Transient,
			msg: errMsg("ServiceUnavailableException: Bedrock is unable to process your request.", 503)},
		{name: "bedrock internal server exception", want: Transient, msg: errMsg("InternalServerException: Internal error", 0)},
		{name: "vertex try the request again", want: Transient,
			msg: errMsg("Internal error encountered. Please try the request again.", 0)},
		{name: "vertex currently unavailable", want: Transient, msg: errMsg(`{"error":{"message":"The service is currently unavailable.","status":"UNAVAILABLE"}}`, 0)},
		{name: "gemini deadline exceeded", want: Transient,
			msg: errMsg(`{"error":{"code":504,"message":"Deadline Exceeded","status":"DEADLINE_EXCEEDED"}}`, 0)},
		{name: "azure server had an error", want: Transient,
			msg: errMsg("The server had an error while processing your request. Sorry about that!", 0)},
		{name: "azure token rate limit", want: Transient,
			msg: errMsg("Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds.", 429)},
		// overload and provider errors
		{name: "anthropic 529 overloaded body", want: Transient,
			msg: errMsg(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 529)},
		{name: "overloaded without status", want: Transient, msg: errMsg("Overloaded", 0)},
		{name: "overloaded_error type only", want: Transient, msg: errMsg("overloaded_error", 0)},
		{name: "gemini model is overloaded", want: Transient,
			msg: errMsg(`{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`, 503)},
		{name: "openrouter provider returned error", want: Transient, msg: errMsg("Provider returned error", 0)},
		// rate limits
		{name: "openai rate limit reached RPM", want: Transient,
			msg: errMsg("Rate limit reached for gpt-4o in organization org-AbCdEf on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms.", 0)},
		{name: "anthropic rate_limit_error", want: Transient,
			msg: errMsg(`{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit."}}`, 0)},
		{name: "too many requests", want: Transient, msg: errMsg("Too Many Requests", 0)},
		// server classes in words
		{name: "service unavailable", want: Transient, msg: errMsg("Service Unavailable", 0)},
		{name: "openai server_error type", want: Transient,
			msg: errMsg(`{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`, 0)},
		{name: "anthropic internal server error", want: Transient,
			msg: errMsg(`{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, 0)},
		{name: "gemini internal error", want: Transient,
			msg: errMsg("An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting", 0)},
		// provider-suggested retry
		{name: "please retry", want: Transient, msg: errMsg("The engine is currently busy; please retry.", 0)},
		{name: "openai retry your request", want: Transient,
			msg: errMsg("The server had an error processing your request. Sorry about that! You can retry your request, or contact us through our help center at help.openai.com if you keep seeing this error.", 0)},
		{name: "try again", want: Transient, msg: errMsg("Something went wrong on our end. Try again later.", 0)},
		// Node network wordings
		{name: "openai sdk connection error", want: Transient, msg: errMsg("Connection error.", 0)},
		{name: "connection refused", want: Transient, msg: errMsg("dial tcp 104.18.33.45:443: connect: connection refused", 0)},
		{name: "connection reset", want: Transient, msg: errMsg("connection reset while reading the response body", 0)},
		{name: "connection closed", want: Transient, msg: errMsg("Connection closed before a response was received", 0)},
		{name: "connection lost", want: Transient, msg: errMsg("Connection lost while streaming", 0)},
		{name: "ECONNRESET", want: Transient, msg: errMsg("read ECONNRESET", 0)},
		{name: "ECONNREFUSED", want: Transient, msg: errMsg("connect ECONNREFUSED 127.0.0.1:11434", 0)},
		{name: "ETIMEDOUT", want: Transient, msg: errMsg("connect ETIMEDOUT 162.159.140.245:443", 0)},
		{name: "EPIPE", want: Transient, msg: errMsg("write EPIPE", 0)},
		{name: "getaddrinfo ENOTFOUND", want: Transient, msg: errMsg("getaddrinfo ENOTFOUND api.anthropic.com", 0)},
		{name: "ENOTFOUND alone", want: Transient, msg: errMsg("queryA ENOTFOUND api.openai.com", 0)},
		{name: "EAI_AGAIN", want: Transient, msg: errMsg("queryA EAI_AGAIN generativelanguage.googleapis.com", 0)},
		{name: "envoy upstream connect error", want: Transient,
			msg: errMsg("upstream connect error or disconnect/reset before headers. reset reason: connection termination", 0)},
		{name: "reset before headers alone", want: Transient, msg: errMsg("stream reset before headers were sent", 0)},
		{name: "socket hang up", want: Transient, msg: errMsg("socket hang up", 0)},
		{name: "unexpected socket close", want: Transient, msg: errMsg("unexpected socket close", 0)},
		{name: "undici other side closed", want: Transient, msg: errMsg("SocketError: other side closed", 0)},
		{name: "fetch failed", want: Transient, msg: errMsg("TypeError: fetch failed", 0)},
		{name: "terminated", want: Transient, msg: errMsg("TypeError: terminated", 0)},
		{name: "timeout", want: Transient, msg: errMsg("Stream idle timeout - no chunk received", 0)},
		{name: "timed out", want: Transient, msg: errMsg("Request timed out.", 0)},
		{name: "retry delay", want: Transient, msg: errMsg("Server asked for a retry delay of 5s", 0)},
		{name: "stream stalled", want: Transient, msg: errMsg("Stream stalled: no data received for 60s", 0)},
		{name: "websocket closed", want: Transient, msg: errMsg("WebSocket closed with code 1006", 0)},
		// Go wordings
		{name: "go no such host", want: Transient,
			msg: errMsg(`Post "https://api.anthropic.com/v1/messages": dial tcp: lookup api.anthropic.com on 127.0.0.53:53: no such host`, 0)},
		{name: "go unexpected EOF", want: Transient, msg: errMsg("unexpected EOF", 0)},
		{name: "go connection reset by peer", want: Transient,
			msg: errMsg("read tcp 10.0.0.2:51234->104.18.33.45:443: read: connection reset by peer", 0)},
		{name: "go broken pipe", want: Transient,
			msg: errMsg("write tcp 10.0.0.2:51234->104.18.33.45:443: write: broken pipe", 0)},
		{name: "go i/o timeout", want: Transient, msg: errMsg("dial tcp 104.18.33.45:443: i/o timeout", 0)},
		{name: "go http2 stream closed", want: Transient, msg: errMsg("http2: stream closed", 0)},
		{name: "go per-request timeout", want: Transient,
			msg: errMsg(`Post "https://api.openai.com/v1/chat/completions": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`, 0)},
		{name: "go bare context deadline exceeded", want: Transient, msg: errMsg("context deadline exceeded", 0)},
		{name: "go server closed idle connection", want: Transient, msg: errMsg("http: server closed idle connection", 0)},
		// stream-envelope failure before the first event
		{name: "anthropic error before message_start", want: Transient,
			msg: errMsg("anthropic: stream ended before message_start", 0)},
		{name: "stream error before the first event", want: Transient,
			msg: errMsg("stream failed before the first event was received", 0)},
		// status numbers as whole numbers in the text
		{name: "whole number 429 after equals", want: Transient, msg: errMsg("request failed: status=429", 0)},
		{name: "whole number 500", want: Transient, msg: errMsg("HTTP 500", 0)},
		{name: "whole number 502 (cloudflare)", want: Transient, msg: errMsg("error code: 502", 0)},
		{name: "whole number 503 in parentheses", want: Transient, msg: errMsg("request failed (503)", 0)},
		{name: "whole number 504 at end of sentence", want: Transient, msg: errMsg("upstream replied 504.", 0)},

		// Negative: status numbers inside longer digit runs or decimals.
		{name: "id 15003 is not 500", want: NotRetryable, msg: errMsg("unknown tool call id 15003", 400)},
		{name: "4290ms is not 429", want: NotRetryable, msg: errMsg("request took 4290ms and returned an invalid payload", 400)},
		{name: "5.503 is not 503", want: NotRetryable, msg: errMsg("unsupported api version 5.503", 400)},
		{name: "503.25 is not 503", want: NotRetryable, msg: errMsg("temperature 503.25 is out of range", 400)},
		{name: "1.429.0 is not 429", want: NotRetryable, msg: errMsg("client 1.429.0 is not supported", 400)},
		{name: "5029 and 25040 are not 502/504", want: NotRetryable, msg: errMsg("field 5029 of record 25040 is invalid", 400)},
		{name: "caller's own cancellation", want: NotRetryable, msg: errMsg("context canceled", 0)},
		{name: "aborted with transient text is not an error turn", want: NotRetryable,
			msg: stopMsg(messages.StopReason_STOP_REASON_ABORTED, "read: connection reset by peer")},
	}
	for _, st := range []int{429, 500, 502, 503, 504, 529} {
		rows = append(rows, classCase{name: fmt.Sprintf("status field %d", st), want: Transient,
			msg: errMsg("request failed", st)})
	}
	for _, st := range []int{400, 401, 403, 404, 409, 422, 501} {
		rows = append(rows, classCase{name: fmt.Sprintf("status field %d is not transient", st), want: NotRetryable,
			msg: errMsg("request failed", st)})
	}
	return rows
}

func TestClassifyTransient(t *testing.T) {
	runClassCases(t, transientCases())
}

// ---- section 2, class 5: not retryable (and success) ----

func notRetryableCases() []classCase {
	return []classCase{
		{name: "anthropic 400 invalid_request_error", want: NotRetryable,
			msg: errMsg(`{"type":"error","error":{"type":"invalid_request_error","message":"messages: text content blocks must be non-empty"}}`, 400)},
		{name: "openai 400 invalid request", want: NotRetryable,
			msg: errMsg("Invalid 'messages[2].tool_calls': empty array. Expected an array with minimum length 1, but got an empty array instead.", 400)},
		{name: "anthropic 401 invalid x-api-key", want: NotRetryable,
			msg: errMsg(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, 401)},
		{name: "openai 401 incorrect api key", want: NotRetryable,
			msg: errMsg("Incorrect API key provided: sk-proj-****abcd. You can find your API key at https://platform.openai.com/account/api-keys.", 401)},
		{name: "anthropic 403 permission_error", want: NotRetryable,
			msg: errMsg(`{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`, 403)},
		{name: "gemini 403 permission denied", want: NotRetryable,
			msg: errMsg(`{"error":{"code":403,"message":"Permission denied: Consumer 'api_key:AIzaSyAbCdEf' has been suspended.","status":"PERMISSION_DENIED"}}`, 403)},
		{name: "openai 404 model", want: NotRetryable,
			msg: errMsg("The model `gpt-9` does not exist or you do not have access to it.", 404)},
		{name: "gemini 404 model", want: NotRetryable,
			msg: errMsg("models/gemini-nine-pro is not found for API version v1beta, or is not supported for generateContent.", 404)},
		{name: "openai safety system", want: NotRetryable,
			msg: errMsg("Your request was rejected as a result of our safety system. Your prompt may contain text that is not allowed by our safety system.", 400)},
		{name: "azure content management policy", want: NotRetryable,
			msg: errMsg("The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.", 400)},
		{name: "gemini content blocked", want: NotRetryable,
			msg: errMsg("Response was blocked due to SAFETY", 0)},
		{name: "openai content_policy_violation", want: NotRetryable,
			msg: errMsg(`{"error":{"code":"content_policy_violation","message":"This request has been blocked by our content filters."}}`, 400)},
		{name: "malformed request", want: NotRetryable,
			msg: errMsg("Malformed request: unexpected end of JSON input", 400)},
		{name: "empty error message", want: NotRetryable, msg: errMsg("", 0)},
		{name: "empty error message with a transient status", want: NotRetryable, msg: errMsg("", 503)},
		{name: "nil message", want: NotRetryable, msg: nil},
		{name: "error by user abort wording", want: NotRetryable, msg: errMsg("Request was aborted by user", 0)},

		// Status numbers only count as whole numbers: not inside identifiers or quantities.
		{name: "502 inside a request id", want: NotRetryable,
			msg: errMsg(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_011CAb502xYz"}`, 401)},
		{name: "429 inside a hex request id", want: NotRetryable,
			msg: errMsg("Incorrect API key provided. (request id: req_7f3a429c1e)", 0)},
		{name: "503 with a unit", want: NotRetryable, msg: errMsg("invalid request: took 503ms", 0)},
		{name: "500 inside a thousands-separated number", want: NotRetryable,
			msg: errMsg("max_tokens: 1,500 is above the limit for this model", 0)},
		// A client error retrying cannot fix vetoes transient wording.
		{name: "400 argument named timeout", want: NotRetryable, msg: errMsg("Unrecognized request argument supplied: timeout", 400)},
		{name: "403 organization terminated", want: NotRetryable, msg: errMsg("Your organization has been terminated.", 403)},
		{name: "400 image size is not the context window", want: NotRetryable,
			msg: errMsg("image exceeds 5 MB maximum: 7020000 bytes > 5242880 bytes", 400)},

		// Success: any stop reason other than error and aborted.
		{name: "stop", want: Success,
			msg: withBlocks(stopMsg(messages.StopReason_STOP_REASON_STOP, ""), textBlock("hi"))},
		{name: "tool_use", want: Success,
			msg: withBlocks(stopMsg(messages.StopReason_STOP_REASON_TOOL_USE, ""), toolCallBlock("call_1", "read", `{"path":"a"}`))},
		{name: "length", want: Success,
			msg: withBlocks(stopMsg(messages.StopReason_STOP_REASON_LENGTH, ""), textBlock("truncated"))},
		{name: "stop with leftover error text", want: Success,
			msg: stopMsg(messages.StopReason_STOP_REASON_STOP, "Overloaded")},
		{name: "unspecified", want: Success, msg: &messages.AssistantMessage{}},
	}
}

func TestClassifyNotRetryable(t *testing.T) {
	runClassCases(t, notRetryableCases())
}

// ---- observable-output rule ----

func TestObservableOutputBlocksRetry(t *testing.T) {
	bases := []struct {
		name string
		msg  func() *messages.AssistantMessage
		want Class
	}{
		{"transient", func() *messages.AssistantMessage {
			return errMsg(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 529)
		}, Transient},
		{"usage limit", func() *messages.AssistantMessage {
			return errMsg(`{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached"}}`, 429)
		}, UsageLimit},
		{"stale replay", func() *messages.AssistantMessage {
			return errMsg("Item with id 'rs_123' not found.", 404)
		}, StaleReplay},
		{"network", func() *messages.AssistantMessage {
			return errMsg("read tcp 10.0.0.2:51234->104.18.33.45:443: read: connection reset by peer", 0)
		}, Transient},
	}
	outputs := []struct {
		name     string
		add      func(*messages.AssistantMessage)
		blocking bool
	}{
		{"no content", func(*messages.AssistantMessage) {}, false},
		{"empty text block", func(m *messages.AssistantMessage) { withBlocks(m, textBlock("")) }, false},
		{"two empty text blocks", func(m *messages.AssistantMessage) { withBlocks(m, textBlock(""), textBlock("")) }, false},
		{"tool call", func(m *messages.AssistantMessage) {
			withBlocks(m, toolCallBlock("toolu_01", "bash", `{"command":"ls"}`))
		}, true},
		{"tool call with empty arguments", func(m *messages.AssistantMessage) {
			withBlocks(m, toolCallBlock("call_1", "list", ""))
		}, true},
		{"non-empty text", func(m *messages.AssistantMessage) { withBlocks(m, textBlock("Here is")) }, true},
		// Spec 2: text is output only when it is non-empty after trimming whitespace.
		{"whitespace text", func(m *messages.AssistantMessage) { withBlocks(m, textBlock(" ")) }, false},
		{"whitespace and newlines", func(m *messages.AssistantMessage) { withBlocks(m, textBlock("  \n"), textBlock("\t\r\n")) }, false},
		{"whitespace then text", func(m *messages.AssistantMessage) { withBlocks(m, textBlock("  \n"), textBlock(" ok")) }, true},
		{"thinking", func(m *messages.AssistantMessage) { withBlocks(m, thinkingBlock("Let me think", "sig")) }, true},
		{"redacted thinking", func(m *messages.AssistantMessage) { withBlocks(m, redactedBlock("EmwKAhgBEgy")) }, true},
		{"thinking block with only a signature", func(m *messages.AssistantMessage) { withBlocks(m, thinkingBlock("", "EqQBCkYI")) }, true},
		{"empty text then tool call", func(m *messages.AssistantMessage) {
			withBlocks(m, textBlock(""), toolCallBlock("toolu_01", "bash", "{}"))
		}, true},
		{"stream_interrupted_after_content", func(m *messages.AssistantMessage) {
			withDetails(m, StopDetailStreamInterruptedAfterContent)
		}, true},
	}
	for _, b := range bases {
		for _, o := range outputs {
			t.Run(b.name+"/"+o.name, func(t *testing.T) {
				m := b.msg()
				o.add(m)
				want := b.want
				if o.blocking {
					want = NotRetryable
				}
				if got := Classify(m, AbortState{}); got != want {
					t.Errorf("Classify = %v, want %v", got, want)
				}
				if got := HasObservableOutput(m); got != o.blocking {
					t.Errorf("HasObservableOutput = %v, want %v", got, o.blocking)
				}
			})
		}
	}
	if HasObservableOutput(nil) {
		t.Error("HasObservableOutput(nil) = true")
	}
}

// ---- reason-less abort ----

func TestReasonlessAbort(t *testing.T) {
	aborted := func() *messages.AssistantMessage {
		return stopMsg(messages.StopReason_STOP_REASON_ABORTED, AbortSentinel)
	}
	errored := func() *messages.AssistantMessage {
		return stopMsg(messages.StopReason_STOP_REASON_ERROR, AbortSentinel)
	}
	runClassCases(t, []classCase{
		{name: "aborted with the sentinel", msg: aborted(), want: ReasonlessAbort},
		{name: "error with the sentinel", msg: errored(), want: ReasonlessAbort},
		{name: "sentinel literal", msg: stopMsg(messages.StopReason_STOP_REASON_ABORTED, "Request was aborted"), want: ReasonlessAbort},
		{name: "empty text block is not content", msg: withBlocks(aborted(), textBlock("")), want: ReasonlessAbort},

		{name: "user abort in progress", msg: aborted(), aborts: AbortState{User: true}, want: NotRetryable},
		{name: "dispose in progress", msg: aborted(), aborts: AbortState{Dispose: true}, want: NotRetryable},
		{name: "edit guard abort", msg: aborted(), aborts: AbortState{EditGuard: true}, want: NotRetryable},
		{name: "error turn with user abort", msg: errored(), aborts: AbortState{User: true}, want: NotRetryable},
		{name: "error turn with dispose", msg: errored(), aborts: AbortState{Dispose: true}, want: NotRetryable},
		{name: "error turn with edit guard", msg: errored(), aborts: AbortState{EditGuard: true}, want: NotRetryable},
		{name: "all flags", msg: aborted(), aborts: AbortState{User: true, Dispose: true, EditGuard: true}, want: NotRetryable},

		{name: "text with a reason", msg: stopMsg(messages.StopReason_STOP_REASON_ABORTED, "Request was aborted by user"), want: NotRetryable},
		{name: "trailing period", msg: stopMsg(messages.StopReason_STOP_REASON_ABORTED, "Request was aborted."), want: NotRetryable},
		{name: "different case", msg: stopMsg(messages.StopReason_STOP_REASON_ABORTED, "request was aborted"), want: NotRetryable},
		{name: "surrounding space", msg: stopMsg(messages.StopReason_STOP_REASON_ABORTED, " Request was aborted"), want: NotRetryable},
		{name: "aborted without text", msg: stopMsg(messages.StopReason_STOP_REASON_ABORTED, ""), want: NotRetryable},

		{name: "with text content", msg: withBlocks(aborted(), textBlock("Partial answer")), want: NotRetryable},
		{name: "with a tool call", msg: withBlocks(aborted(), toolCallBlock("toolu_01", "bash", "{}")), want: NotRetryable},
		{name: "with thinking", msg: withBlocks(errored(), thinkingBlock("hmm", "sig")), want: NotRetryable},
		{name: "with redacted thinking", msg: withBlocks(aborted(), redactedBlock("xyz")), want: NotRetryable},
		{name: "interrupted after content", msg: withDetails(aborted(), StopDetailStreamInterruptedAfterContent), want: NotRetryable},

		{name: "sentinel on a successful turn", msg: stopMsg(messages.StopReason_STOP_REASON_STOP, AbortSentinel), want: Success},
	})

	if ReasonlessAbort.AllowsModelFallback() {
		t.Error("ReasonlessAbort.AllowsModelFallback() = true, want false")
	}
	if !ReasonlessAbort.Retryable() {
		t.Error("ReasonlessAbort.Retryable() = false, want true")
	}
}

// ---- Class methods ----

var allClasses = []Class{Success, NotRetryable, ContextOverflow, ClassifierRefusal, StaleReplay, UsageLimit, Transient, ReasonlessAbort}

func TestClassString(t *testing.T) {
	want := map[Class]string{
		Success:           "success",
		NotRetryable:      "not_retryable",
		ContextOverflow:   "context_overflow",
		ClassifierRefusal: "classifier_refusal",
		StaleReplay:       "stale_replay",
		UsageLimit:        "usage_limit",
		Transient:         "transient",
		ReasonlessAbort:   "reasonless_abort",
	}
	for _, c := range allClasses {
		if got := c.String(); got != want[c] {
			t.Errorf("Class(%d).String() = %q, want %q", c, got, want[c])
		}
	}
	for _, c := range []Class{ReasonlessAbort + 1, 200, 255} {
		if got := c.String(); got != "unknown" {
			t.Errorf("Class(%d).String() = %q, want \"unknown\"", c, got)
		}
	}
}

func TestProviderText(t *testing.T) {
	tests := []struct {
		text   string
		status int
		want   string
	}{
		{"429 Too Many Requests: You exceeded your current quota", 429, "You exceeded your current quota"},
		{"503 Service Unavailable", 503, ""},
		{"418 I'm a teapot: short and stout", 418, "short and stout"},
		{"529: overloaded_error: Overloaded", 529, "overloaded_error: Overloaded"},
		{"500 Internal Server Error: internal error", 500, "internal error"},
		// Not our status line: kept whole.
		{"429 Too Many Requests: quota", 503, "429 Too Many Requests: quota"},
		{"429 Too Many Requests: quota", 0, "429 Too Many Requests: quota"},
		{"4290 requests made", 429, "4290 requests made"},
		{"429 requests per minute exceeded", 429, "429 requests per minute exceeded"},
		{"Rate limit reached", 429, "Rate limit reached"},
		{"", 429, ""},
		{"42", 42, "42"},
	}
	for _, tt := range tests {
		if got := ProviderText(tt.text, tt.status); got != tt.want {
			t.Errorf("ProviderText(%q, %d) = %q, want %q", tt.text, tt.status, got, tt.want)
		}
	}
}

func TestClassRetryable(t *testing.T) {
	retryable := map[Class]bool{
		Success: false, NotRetryable: false, ContextOverflow: false,
		ClassifierRefusal: true, StaleReplay: true, UsageLimit: true, Transient: true, ReasonlessAbort: true,
	}
	for _, c := range allClasses {
		if got := c.Retryable(); got != retryable[c] {
			t.Errorf("%v.Retryable() = %v, want %v", c, got, retryable[c])
		}
		// Spec 3 step 8: stale replay retries at once on the same model.
		if got, want := c.AllowsModelFallback(), c != ReasonlessAbort && c != StaleReplay; got != want {
			t.Errorf("%v.AllowsModelFallback() = %v, want %v", c, got, want)
		}
	}
}

// ---- fuzzing ----

// Content bits of a fuzzed message.
const (
	fuzzText = 1 << iota
	fuzzEmptyText
	fuzzThinking
	fuzzRedacted
	fuzzToolCall
)

// Abort bits of a fuzzed AbortState.
const (
	fuzzAbortUser = 1 << iota
	fuzzAbortDispose
	fuzzAbortEditGuard
)

func fuzzMessage(text string, status int32, stop int32, details string, content uint8) *messages.AssistantMessage {
	m := &messages.AssistantMessage{
		StopReason:   messages.StopReason(stop),
		ErrorMessage: text,
		HttpStatus:   status,
	}
	if details != "" {
		m.StopDetails = &messages.StopDetails{Type: details}
	}
	if content&fuzzEmptyText != 0 {
		m.Content = append(m.Content, textBlock(""))
	}
	if content&fuzzText != 0 {
		m.Content = append(m.Content, textBlock("partial"))
	}
	if content&fuzzThinking != 0 {
		m.Content = append(m.Content, thinkingBlock("thinking", "sig"))
	}
	if content&fuzzRedacted != 0 {
		m.Content = append(m.Content, redactedBlock("opaque"))
	}
	if content&fuzzToolCall != 0 {
		m.Content = append(m.Content, toolCallBlock("call_1", "bash", "{}"))
	}
	return m
}

// contentBits maps a table message back onto the fuzz content bits.
func contentBits(m *messages.AssistantMessage) uint8 {
	var bits uint8
	for _, b := range m.GetContent() {
		switch {
		case b.GetToolCall() != nil:
			bits |= fuzzToolCall
		case b.GetText() != nil && b.GetText().GetText() == "":
			bits |= fuzzEmptyText
		case b.GetText() != nil:
			bits |= fuzzText
		case b.GetThinking() != nil:
			bits |= fuzzThinking
		case b.GetRedactedThinking() != nil:
			bits |= fuzzRedacted
		}
	}
	return bits
}

func abortBits(a AbortState) uint8 {
	var bits uint8
	if a.User {
		bits |= fuzzAbortUser
	}
	if a.Dispose {
		bits |= fuzzAbortDispose
	}
	if a.EditGuard {
		bits |= fuzzAbortEditGuard
	}
	return bits
}

func FuzzClassify(f *testing.F) {
	for _, table := range [][]classCase{
		contextOverflowCases(), classifierRefusalCases(), staleReplayCases(),
		usageLimitCases(), transientCases(), notRetryableCases(),
	} {
		for _, tc := range table {
			m := tc.msg
			f.Add(m.GetErrorMessage(), m.GetHttpStatus(), int32(m.GetStopReason()),
				m.GetStopDetails().GetType(), contentBits(m), abortBits(tc.aborts))
		}
	}
	errStop := int32(messages.StopReason_STOP_REASON_ERROR)
	abortStop := int32(messages.StopReason_STOP_REASON_ABORTED)
	f.Add(AbortSentinel, int32(0), abortStop, "", uint8(0), uint8(0))
	f.Add(AbortSentinel, int32(0), errStop, "", uint8(fuzzEmptyText), uint8(fuzzAbortEditGuard))
	f.Add("Overloaded", int32(529), errStop, StopDetailStreamInterruptedAfterContent, uint8(0), uint8(0))
	f.Add("Overloaded", int32(529), errStop, StopDetailRefusal, uint8(fuzzToolCall|fuzzText), uint8(0))
	f.Add(strings.Repeat("Ünïcödé ", 200)+"503", int32(0), errStop, "", uint8(0), uint8(0))
	f.Add(strings.Repeat("x", 1023)+"A", int32(0), errStop, "", uint8(0), uint8(0))
	f.Add("\xff\xfe 500 \x00", int32(-1), int32(99), "\x00", uint8(255), uint8(255))

	f.Fuzz(func(t *testing.T, text string, status int32, stop int32, details string, content uint8, abortFlags uint8) {
		m := fuzzMessage(text, status, stop, details, content)
		aborts := AbortState{
			User:      abortFlags&fuzzAbortUser != 0,
			Dispose:   abortFlags&fuzzAbortDispose != 0,
			EditGuard: abortFlags&fuzzAbortEditGuard != 0,
		}
		before := proto.Clone(m)

		got := Classify(m, aborts)

		if got.String() == "unknown" {
			t.Fatalf("Classify returned unknown class %d", got)
		}
		if again := Classify(m, aborts); again != got {
			t.Fatalf("Classify is not deterministic: %v then %v", got, again)
		}
		if !proto.Equal(before, m) {
			t.Fatalf("Classify modified its message")
		}

		refusalType := details == StopDetailRefusal || details == StopDetailSensitive
		if HasObservableOutput(m) && !refusalType {
			switch got {
			case StaleReplay, UsageLimit, Transient, ReasonlessAbort:
				t.Fatalf("message with observable output classified %v", got)
			}
		}

		switch m.GetStopReason() {
		case messages.StopReason_STOP_REASON_ERROR:
			if got == Success {
				t.Fatalf("error turn classified %v", got)
			}
			if text == "" && got != NotRetryable {
				t.Fatalf("error turn without error_message classified %v, want not_retryable", got)
			}
		case messages.StopReason_STOP_REASON_ABORTED:
			if got != ReasonlessAbort && got != NotRetryable {
				t.Fatalf("aborted turn classified %v", got)
			}
		default:
			if got != Success {
				t.Fatalf("stop reason %v classified %v, want success", m.GetStopReason(), got)
			}
		}

		if got == ReasonlessAbort && (text != AbortSentinel || abortFlags&7 != 0 || HasObservableOutput(m)) {
			t.Fatalf("reason-less abort with text %q, aborts %+v, output %v", text, aborts, HasObservableOutput(m))
		}
		if got == ClassifierRefusal && !refusalType {
			t.Fatalf("classifier refusal without the typed field (details %q)", details)
		}
		if refusalType && m.GetStopReason() == messages.StopReason_STOP_REASON_ERROR && text != "" &&
			got != ClassifierRefusal && got != ContextOverflow {
			t.Fatalf("typed refusal classified %v", got)
		}
	})
}

// ---- benchmarks ----

var classSink Class

func BenchmarkClassify(b *testing.B) {
	// A typical provider error: Anthropic's 529 overload body.
	typical := errMsg(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CTqZzAbCdEfGhJkLmNpQr"}`, 529)

	// A long (2 KB) body: a gateway's HTML 502 page.
	var sb strings.Builder
	sb.WriteString(`<!DOCTYPE html><html lang="en-US"><head><title>api.example.com | 502: Bad gateway</title>`)
	sb.WriteString(`<meta charset="UTF-8" /><meta name="viewport" content="width=device-width,initial-scale=1" />`)
	for sb.Len() < 1900 {
		sb.WriteString(`<div class="cf-column"><span class="cf-status-label">Working</span><p>Host Error</p></div>` + "\n")
	}
	sb.WriteString(`<p>The web server reported a bad gateway error.</p></body></html>`)
	long := errMsg(sb.String(), 502)

	// A typical non-retryable error: every row of the table is checked.
	auth := errMsg(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_abcdefGhiJ"}`, 401)

	for _, bc := range []struct {
		name string
		msg  *messages.AssistantMessage
	}{
		{"anthropic_529_overloaded", typical},
		{"long_2KB_html_502", long},
		{"anthropic_401_not_retryable", auth},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.msg.GetErrorMessage())))
			for b.Loop() {
				classSink = Classify(bc.msg, AbortState{})
			}
		})
	}
}
