// Package openai is a provider on the official OpenAI Go SDK. It speaks
// either the Chat Completions API or the Responses API, streaming, against
// api.openai.com or any OpenAI-compatible base URL. Unlike the SDK's
// client, it reads no environment variable (OPENAI_API_KEY,
// OPENAI_BASE_URL, ...): each request carries its own key, or none.
//
// The SDK's own retries are off: the retry policy of the runtime owns
// retrying, and reads what this provider puts in a failed message (HTTP
// status, response headers, and error text carrying the provider's own
// wording and error code).
//
// With the Responses API the provider chains turns with
// previous_response_id: after a completed response it remembers the
// response id and the runtime-context prefix the response covered, and the
// next call of the session sends only the entries after it. ResetSession
// forgets the id, so the next call sends the whole context again. The chain
// is only followed when the session's context still starts with exactly the
// entries the response saw, on the same model and credential.
//
// Deltas: "text" deltas carry visible text (a model refusal is shown as
// text); "tool_call" deltas carry fragments of a call's arguments JSON (empty
// for a chunk that only opens the call); "thinking" deltas carry reasoning:
// the delta's reasoning_content (DeepSeek, vLLM, SGLang, llama.cpp, LiteLLM)
// or reasoning (OpenRouter) on Chat Completions, the reasoning summary on
// Responses. Reasoning is kept as a thinking block before the text, and is
// never sent back to the server (those servers reject or ignore it).
//
// A content filter's stop (finish_reason content_filter, or a response
// incomplete for content_filter) is a classifier refusal, stop details
// "sensitive" or the type and fields of the stop_details object a gateway
// sends with it; its error text is the error message sent with it on the
// same chunk, verbatim, else the stop details' explanation, else a default.
//
// Every message of a call that got a response, success or failure, carries
// in RateLimits the x-ratelimit-* limits its headers announced, read when
// the headers arrived (provider.RateLimitsOf).
//
// Failures follow the retry policy's needs: an HTTP error keeps its status,
// its headers (lower-case names, first value) and "<status> <status text>:
// <provider message> (code: ..., type: ...)"; a network error keeps Go's
// wording; a stream that breaks after output keeps the partial content with
// stop details "stream_interrupted_after_content"; the caller's cancellation
// is an abort, while Config.RequestTimeout expiring is an error holding
// "context deadline exceeded".
package openai

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// ProviderName is the provider field of every message this package returns.
const ProviderName = "openai"

// API names for Config.API.
const (
	APIChat      = "chat"
	APIResponses = "responses"
)

// Config configures a Provider.
type Config struct {
	// BaseURL of the API (DefaultBaseURL when empty; the OPENAI_BASE_URL
	// environment variable is not read).
	BaseURL string
	// API is "chat" (Chat Completions, the default) or "responses".
	API string
	// RequestTimeout bounds each call, from sending the request to the end of
	// the stream; 0 means no limit. Its expiry is an error whose text holds
	// "context deadline exceeded", unlike the caller's cancellation, which is
	// an abort.
	RequestTimeout time.Duration
	// HTTPClient sends the requests; nil means a client on a clone of
	// http.DefaultTransport. Either way the provider reads at most
	// provider.MaxErrorBody bytes of an error response body.
	HTTPClient *http.Client
	// MaxTokens caps the output tokens of a turn (max_completion_tokens or
	// max_output_tokens); 0 leaves the server's default.
	MaxTokens int64
}

// DefaultBaseURL is the base URL of the OpenAI API, Config.BaseURL's
// default.
const DefaultBaseURL = "https://api.openai.com/v1/"

// Provider streams turns through the OpenAI SDK. It is safe for concurrent
// use by many sessions.
type Provider struct {
	cfg       Config
	chat      oai.ChatCompletionService
	responses responses.ResponseService

	seed     maphash.Seed
	mu       sync.Mutex
	sessions map[string]*chain // Responses API chaining state, by session
	epochs   map[string]uint64 // bumped by ResetSession
}

// MaxOutputTokens is the output bound every turn sends (0: none sent)
// (provider.OutputBounded).
func (p *Provider) MaxOutputTokens() int64 { return p.cfg.MaxTokens }

var (
	_ provider.Provider   = (*Provider)(nil)
	_ provider.GenAINamer = (*Provider)(nil)
)

// GenAIProviderName is "openai", OpenTelemetry's gen_ai.provider.name of
// the OpenAI API: also for an OpenAI-compatible server at another
// BaseURL, whose requests and responses are OpenAI's.
func (p *Provider) GenAIProviderName() string { return ProviderName }

// New returns a provider for cfg. It reads no environment: the SDK's
// client would fill in OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_ORG_ID,
// OPENAI_PROJECT_ID and OPENAI_CUSTOM_HEADERS, so the provider builds
// the SDK's services without it. The key comes with each request
// (provider.Request.APIKey); a request without one sends none.
func New(cfg Config) *Provider {
	opts := []option.RequestOption{
		option.WithBaseURL(cmp.Or(cfg.BaseURL, DefaultBaseURL)),
		option.WithMaxRetries(0),
		// Error bodies are bounded below the SDK, which reads them whole.
		option.WithHTTPClient(provider.BoundedClient(cfg.HTTPClient)),
	}
	return &Provider{
		cfg:       cfg,
		chat:      oai.NewChatCompletionService(opts...),
		responses: responses.NewResponseService(opts...),
		seed:      maphash.MakeSeed(),
		sessions:  map[string]*chain{},
		epochs:    map[string]uint64{},
	}
}

// Stream runs one turn. It never returns nil and never panics on odd server
// output.
func (p *Provider) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta)) (msg *messages.AssistantMessage) {
	if onDelta == nil {
		onDelta = func(provider.Delta) {}
	}
	t := &turn{callerCtx: ctx, reqCtx: ctx, timeout: p.cfg.RequestTimeout, onDelta: onDelta}
	defer func() {
		if r := recover(); r != nil {
			msg = provider.Failure(0, fmt.Sprintf("openai provider: internal error: %v", r), nil)
		}
		if msg == nil {
			msg = provider.Failure(0, "openai provider: no message", nil)
		}
		msg.Provider = ProviderName
		msg.Model = req.Model
		msg.RateLimits = t.limits
		provider.ValidUTF8(msg)
	}()
	if ctx.Err() != nil {
		return provider.Aborted(nil)
	}
	if p.cfg.RequestTimeout > 0 {
		var cancel context.CancelFunc
		t.reqCtx, cancel = context.WithTimeout(ctx, p.cfg.RequestTimeout)
		defer cancel()
	}
	if p.cfg.API == APIResponses {
		return p.streamResponses(t, req)
	}
	return p.streamChat(t, req)
}

// ResetSession forgets the session's previous_response_id: its next call
// sends the whole context without one.
func (p *Provider) ResetSession(sessionID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sessions, sessionID)
	p.epochs[sessionID]++
}

// requestOptions are the per-call options: the credential and a place to
// keep the HTTP response (for its status and headers, also when the SDK
// could not decode an error body).
func (p *Provider) requestOptions(req provider.Request, res **http.Response) []option.RequestOption {
	opts := []option.RequestOption{option.WithMaxRetries(0), option.WithResponseInto(res)}
	if req.APIKey != "" {
		opts = append(opts, option.WithAPIKey(req.APIKey))
	}
	return opts
}

// turn is the state shared by both APIs while one call streams.
type turn struct {
	callerCtx context.Context // the caller's: its cancellation is an abort
	reqCtx    context.Context // callerCtx plus Config.RequestTimeout
	timeout   time.Duration
	onDelta   func(provider.Delta)
	res       *http.Response       // the HTTP response, once there is one
	usage     *messages.Usage      // the token counts the stream reported
	model     string               // the model the response named
	limits    *messages.RateLimits // what the response's headers announced
}

// received reads the rate limits of the response, if any, once the call has
// returned: the SDK returns a stream as soon as the headers arrive. They go
// to the caller's pacing at once (provider.LimitsSeen).
func (t *turn) received() {
	t.limits = provider.RateLimitsOf(t.res, time.Now())
	provider.LimitsSeen(t.callerCtx, t.limits)
}

func (t *turn) text(s string) {
	if s != "" {
		t.onDelta(provider.Delta{Kind: "text", Text: s})
	}
}

func (t *turn) thinking(s string) {
	if s != "" {
		t.onDelta(provider.Delta{Kind: "thinking", Text: s})
	}
}

func (t *turn) toolCall(s string) {
	t.onDelta(provider.Delta{Kind: "tool_call", Text: s})
}

// success is a message that ended normally, with the HTTP status.
func (t *turn) success(content []*messages.ContentBlock, reason messages.StopReason) *messages.AssistantMessage {
	status := int32(http.StatusOK)
	if t.res != nil && t.res.StatusCode >= 200 && t.res.StatusCode < 300 {
		status = int32(t.res.StatusCode)
	}
	return &messages.AssistantMessage{Content: content, StopReason: reason, HttpStatus: status, Usage: t.usage,
		ResponseModel: t.model}
}

// setUsage records the stream's token counts; input counts every prompt
// token, cached ones included, as both APIs report it.
func (t *turn) setUsage(input, cached, output int64) {
	t.usage = &messages.Usage{Input: input - cached, CacheRead: cached, Output: output}
}

// sensitive is a turn the provider's content filter stopped: a classifier
// refusal with stop_details.type "sensitive", or the type, category and
// explanation of the structured stop details the provider sent with it.
// Its error message keeps the provider's words (provider.RefusalMessage):
// errText, the error text sent with the refusal, verbatim; else the
// details' explanation; else fallback.
func (t *turn) sensitive(content []*messages.ContentBlock, errText string, details *messages.StopDetails, fallback string) *messages.AssistantMessage {
	m := t.success(content, messages.StopReason_STOP_REASON_ERROR)
	m.StopDetails = &messages.StopDetails{Type: "sensitive"}
	if details != nil {
		if details.Type != "" {
			m.StopDetails.Type = details.Type
		}
		m.StopDetails.Fields = details.Fields
	}
	m.ErrorMessage = provider.RefusalMessage(errText, details.GetFields()["explanation"], fallback)
	return m
}

// streamFailure is a failure found in the stream itself (an error event, a
// failed response, a stream that ended early), after HTTP 200.
func (t *turn) streamFailure(content []*messages.ContentBlock, text string) *messages.AssistantMessage {
	if t.callerCtx.Err() != nil {
		return provider.Aborted(content)
	}
	m := provider.Failure(0, text, nil)
	m.Content = content
	if retry.ContentHasOutput(content) {
		m.StopDetails = &messages.StopDetails{Type: "stream_interrupted_after_content"}
	}
	return m
}

// failure turns an error of the SDK or of the transport into a message:
// an abort when the caller cancelled, else an error with the HTTP status,
// headers and the provider's text when there was an HTTP error response,
// else the Go error text.
func (t *turn) failure(err error, content []*messages.ContentBlock) *messages.AssistantMessage {
	if t.callerCtx.Err() != nil {
		return provider.Aborted(content)
	}
	var apiErr *oai.Error
	var streamErr *ssestream.StreamError
	switch {
	case errors.As(err, &apiErr):
		return httpFailure(apiErr.StatusCode, apiErr.Response, apiErr)
	case t.res != nil && t.res.StatusCode >= 400:
		// The SDK failed to decode the error body (not JSON, or no "error"
		// object); the response it kept still has the status and body.
		return httpFailure(t.res.StatusCode, t.res, nil)
	case errors.As(err, &streamErr):
		return t.streamFailure(content, inStreamErrorText(streamErr))
	}
	text := err.Error()
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		text = "malformed event in the response stream: " + text
	}
	if t.reqCtx.Err() == context.DeadlineExceeded {
		// Config.RequestTimeout expired (the caller's context did not).
		text = fmt.Sprintf("request timed out after %v: %s", t.timeout, text)
		if !strings.Contains(text, "context deadline exceeded") {
			text += ": context deadline exceeded"
		}
	}
	if errors.Is(err, io.EOF) && !strings.Contains(text, "unexpected EOF") && t.res == nil {
		// Go says only "EOF" when the server closes the connection before
		// answering; say what happened so the failure reads as a network one.
		text += " (connection closed by the server before a response)"
	}
	return t.streamFailure(content, text)
}

// incomplete is a stream that ended cleanly but without a finish reason or
// a final event.
func (t *turn) incomplete(content []*messages.ContentBlock, what string) *messages.AssistantMessage {
	if t.callerCtx.Err() != nil {
		return provider.Aborted(content)
	}
	if t.reqCtx.Err() == context.DeadlineExceeded {
		return t.streamFailure(content, fmt.Sprintf("request timed out after %v: context deadline exceeded", t.timeout))
	}
	if t.res != nil {
		if mt, _, _ := mime.ParseMediaType(t.res.Header.Get("Content-Type")); mt != "" && mt != "text/event-stream" {
			return t.streamFailure(content, fmt.Sprintf("expected a text/event-stream response, got %q with no %s", mt, what))
		}
	}
	return t.streamFailure(content, fmt.Sprintf("connection closed before the stream completed (no %s received)", what))
}

// maxBodyText bounds how much of a raw error body goes into a message.
const maxBodyText = 4096

// httpFailure is an HTTP error response: status, lower-cased headers, and
// "<status> <status text>: <provider message> (code: ..., type: ...)", or
// the raw body when the provider gave no message.
func httpFailure(status int, res *http.Response, apiErr *oai.Error) *messages.AssistantMessage {
	var body string
	if res != nil && res.Body != nil {
		// The SDK has already read the body and put it back in memory.
		b, _ := io.ReadAll(io.LimitReader(res.Body, maxBodyText+1))
		body = strings.TrimSpace(string(b))
		if len(body) > maxBodyText {
			body = body[:maxBodyText] + "…"
		}
	}
	var text strings.Builder
	text.WriteString(statusLine(status))
	// Compatible servers vary: "error" may be an object, a string, or
	// missing with the message at the top level.
	msg, code, typ := errorFields([]byte(body))
	if apiErr != nil {
		msg, code, typ = firstOf(apiErr.Message, msg), firstOf(apiErr.Code, code), firstOf(apiErr.Type, typ)
	}
	switch {
	case msg != "":
		text.WriteString(": ")
		text.WriteString(msg)
	case body != "":
		text.WriteString(": ")
		text.WriteString(body)
	}
	if d := details(code, typ); d != "" {
		text.WriteString(" ")
		text.WriteString(d)
	}
	return provider.Failure(status, text.String(), lowerHeaders(res))
}

func statusLine(status int) string {
	if s := http.StatusText(status); s != "" {
		return fmt.Sprintf("%d %s", status, s)
	}
	return fmt.Sprintf("%d", status)
}

// details is "(code: c, type: t)", leaving out what is empty or repeated.
func details(code, typ string) string {
	var parts []string
	if code != "" {
		parts = append(parts, "code: "+code)
	}
	if typ != "" && typ != code {
		parts = append(parts, "type: "+typ)
	}
	if len(parts) == 0 {
		return ""
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// streamErrorMessage is the provider's own message in an SSE chunk of the
// form {"error": {...}}, verbatim ("" when e is nil or has none).
func streamErrorMessage(e *ssestream.StreamError) string {
	if e == nil {
		return ""
	}
	msg, _, _ := errorFields(e.Event.Data)
	return msg
}

// inStreamErrorText reads an SSE chunk of the form {"error": {...}}.
func inStreamErrorText(e *ssestream.StreamError) string {
	msg, code, typ := errorFields(e.Event.Data)
	if msg == "" {
		return e.Error()
	}
	if d := details(code, typ); d != "" {
		msg += " " + d
	}
	return msg
}

// errorFields reads message, code and type from an error body: the "error"
// object (or string), else the top level.
func errorFields(data []byte) (msg, code, typ string) {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return "", "", ""
	}
	fields := top
	if raw, ok := top["error"]; ok {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s, "", ""
		}
		fields = nil
		if json.Unmarshal(raw, &fields) != nil {
			return "", "", ""
		}
	}
	return scalar(fields["message"]), scalar(fields["code"]), scalar(fields["type"])
}

// scalar is a JSON string or number as text; anything else is "".
func scalar(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// lowerHeaders returns the response headers with lower-case names, first
// value each.
func lowerHeaders(res *http.Response) map[string]string {
	if res == nil || len(res.Header) == 0 {
		return nil
	}
	out := make(map[string]string, len(res.Header))
	for k, v := range res.Header {
		if len(v) > 0 {
			out[strings.ToLower(k)] = v[0]
		}
	}
	return out
}

// textBlock, thinkingBlock and toolBlock build content blocks.
func textBlock(s string) *messages.ContentBlock {
	return &messages.ContentBlock{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: s}}}
}

func thinkingBlock(s string) *messages.ContentBlock {
	return &messages.ContentBlock{Block: &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{Thinking: s}}}
}

func toolBlock(id, name, args string) *messages.ContentBlock {
	return &messages.ContentBlock{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: id, Name: name, ArgumentsJson: args}}}
}
