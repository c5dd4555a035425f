// Package anthropic is a provider.Provider for Anthropic's Messages API,
// built on the official Go SDK (github.com/anthropics/anthropic-sdk-go/v2)
// and its streaming call (client.Messages.NewStreaming).
//
// The adapter is a translation layer only: it owns no retry (the SDK's own
// retries are switched off, the session's retry policy decides), and it turns
// every outcome into one *messages.AssistantMessage whose error text, HTTP
// status and headers carry what the retry classifier and hint parser need:
//
//   - an HTTP error gives "<status> <status text>: <error.type>: <error.message>"
//     (or the raw body when it is not Anthropic's error JSON), the status and
//     the response headers (lower-case names, first value);
//   - an `event: error` before message_start gives
//     "<type>: <message> (stream error before message_start)";
//   - a network failure gives Go's own error text and status 0;
//   - a stream that breaks after text, thinking or a tool call keeps the
//     partial content and is marked stream_interrupted_after_content;
//   - a refusal keeps its partial text and is marked with stop details
//     "refusal" holding the category and explanation the API sent; its
//     error text is the explanation, verbatim, else "the model refused to
//     continue (stop_reason refusal, category <category>)";
//   - the caller's cancellation returns provider.Aborted at once, while
//     Config.RequestTimeout gives an error reading "context deadline exceeded".
//
// Every message of a call that got a response, success or failure, carries
// in RateLimits the anthropic-ratelimit-* limits its headers announced, read
// when the headers arrived (provider.RateLimitsOf).
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/ssestream"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// ProviderName is the value of AssistantMessage.Provider for this adapter.
const ProviderName = "anthropic"

// DefaultMaxTokens is the output limit used when Config.MaxTokens is 0.
const DefaultMaxTokens = 4096

// Config configures a Provider.
type Config struct {
	// BaseURL replaces the API's base URL ("https://api.anthropic.com/"), for
	// proxies and tests. Empty means the SDK's production default; the
	// ANTHROPIC_BASE_URL environment variable is not read.
	BaseURL string
	// RequestTimeout bounds one whole request, response headers and stream
	// included; 0 means none. It is distinct from the caller's context: when it
	// expires the result is an error ("context deadline exceeded"), not an abort.
	RequestTimeout time.Duration
	// HTTPClient sends the requests; nil means a client of the provider's own
	// (a clone of http.DefaultTransport). Either way the provider reads at
	// most provider.MaxErrorBody bytes of an error response body.
	HTTPClient *http.Client
	// MaxTokens is the output token limit (max_tokens); 0 means DefaultMaxTokens.
	MaxTokens int64
	// ThinkingBudget enables extended thinking with this budget_tokens; 0
	// disables it. The API requires MaxTokens to exceed it.
	ThinkingBudget int64
}

// Provider streams turns from the Anthropic Messages API. It is safe for
// concurrent use: it holds only immutable configuration and an SDK client.
type Provider struct {
	cfg    Config
	client sdk.Client
}

var _ provider.GenAINamer = (*Provider)(nil)

// GenAIProviderName is "anthropic", OpenTelemetry's gen_ai.provider.name
// of the Anthropic Messages API.
func (p *Provider) GenAIProviderName() string { return ProviderName }

// MaxOutputTokens is the max_tokens every turn sends (provider.OutputBounded).
func (p *Provider) MaxOutputTokens() int64 { return p.cfg.MaxTokens }

// RefundsUnusedOutput is true: Anthropic charges max_tokens of output at
// admission and adjusts to the tokens used at the end
// (https://docs.anthropic.com/en/api/rate-limits).
func (p *Provider) RefundsUnusedOutput() bool { return true }

// New returns a Provider for cfg. The SDK client is built without the SDK's
// environment defaults (no ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL or profile
// files are read): the credential comes with each request, as Request.APIKey.
func New(cfg Config) *Provider {
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		// Error bodies are bounded below the SDK, which reads them whole.
		option.WithHTTPClient(provider.BoundedClient(cfg.HTTPClient)),
		option.WithMaxRetries(0),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	return &Provider{cfg: cfg, client: sdk.NewClient(opts...)}
}

// ResetSession does nothing. The Messages API is stateless: every call sends
// the whole context, so the adapter caches nothing per session (there
// is no equivalent of OpenAI's previous_response_id to drop).
func (p *Provider) ResetSession(string) {}

// Stream sends one turn and streams its output. See the package comment for
// how outcomes map to the returned message, which is never nil.
func (p *Provider) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta)) (out *messages.AssistantMessage) {
	cb := &callerCallback{onDelta: onDelta} // a panic of the caller's onDelta is the caller's
	acc := newAccumulator(cb.call)
	var limits *messages.RateLimits // what the response's headers announced
	defer func() {
		// Never panic on odd input or output: a panic of the adapter or the
		// SDK becomes an error message.
		if r := recover(); r != nil {
			if cb.running {
				panic(r)
			}
			out = p.finish(req, &messages.AssistantMessage{
				Content:      acc.content(),
				StopReason:   messages.StopReason_STOP_REASON_ERROR,
				ErrorMessage: fmt.Sprintf("anthropic provider: internal error: %v", r),
			})
		}
		out.RateLimits = limits
	}()
	if ctx.Err() != nil {
		return p.finish(req, provider.Aborted(nil))
	}

	params, err := p.buildParams(req)
	if err != nil {
		return p.finish(req, provider.Failure(0, err.Error(), nil))
	}

	reqCtx, cancel := p.requestContext(ctx)
	defer cancel()

	var resp *http.Response
	stream := p.client.Messages.NewStreaming(reqCtx, params, requestOptions(req, &resp)...)
	defer stream.Close()
	// The SDK returns the stream once the headers have arrived: their
	// limits go to the caller's pacing at once.
	limits = provider.RateLimitsOf(resp, time.Now())
	provider.LimitsSeen(ctx, limits)

	readStream(stream, acc)
	if err := stream.Err(); err != nil {
		return p.finish(req, p.failure(ctx, reqCtx, err, acc, resp))
	}
	if !acc.complete() {
		return p.finish(req, incomplete(ctx, acc, resp))
	}
	return p.finish(req, acc.result())
}

// requestOptions are the per-call options: the credential, when the
// request has one (a request without sends no key: the client reads none
// from the environment), and a place to keep the HTTP response.
func requestOptions(req provider.Request, res **http.Response) []option.RequestOption {
	opts := []option.RequestOption{option.WithMaxRetries(0), option.WithResponseInto(res)}
	if req.APIKey != "" {
		opts = append(opts, option.WithAPIKey(req.APIKey))
	}
	return opts
}

// callerCallback is the caller's onDelta (nil for none), remembering
// whether a call of it is running: a panic there is the caller's.
type callerCallback struct {
	onDelta func(provider.Delta)
	running bool
}

// call hands d to the caller's onDelta, if any.
func (c *callerCallback) call(d provider.Delta) {
	if c.onDelta != nil {
		c.running = true
		c.onDelta(d)
		c.running = false
	}
}

// requestContext is ctx bounded by Config.RequestTimeout, if set, and its
// cancel function.
func (p *Provider) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.cfg.RequestTimeout > 0 {
		return context.WithTimeout(ctx, p.cfg.RequestTimeout)
	}
	return ctx, func() {}
}

// readStream feeds the stream's events to acc until the message stops or
// the stream ends.
func readStream(stream *ssestream.Stream[sdk.MessageStreamEventUnion], acc *accumulator) {
	for stream.Next() {
		acc.handle(stream.Current())
		if acc.done() {
			break
		}
	}
}

// incomplete is the message of a stream whose body ended cleanly before the
// message did: an abort when ctx, the caller's context, ended, else an
// interrupted stream (a proxy or server closed it early).
func incomplete(ctx context.Context, acc *accumulator, resp *http.Response) *messages.AssistantMessage {
	if ctx.Err() != nil {
		return provider.Aborted(acc.content())
	}
	text := "stream closed before message_start"
	if acc.started {
		text = "stream closed before message_stop: unexpected EOF"
	}
	return interrupted(acc, text, statusOf(resp), headersOf(resp))
}

// finish stamps the fields every result carries.
func (p *Provider) finish(req provider.Request, m *messages.AssistantMessage) *messages.AssistantMessage {
	m.Provider = ProviderName
	m.Model = req.Model
	m.TimestampMs = time.Now().UnixMilli()
	return provider.ValidUTF8(m)
}

// failure maps a stream error to a message. ctx is the caller's context,
// reqCtx the one bounded by RequestTimeout, resp the HTTP response if any.
func (p *Provider) failure(ctx, reqCtx context.Context, err error, acc *accumulator, resp *http.Response) *messages.AssistantMessage {
	// The caller cancelled: abort, whatever the error looks like.
	if ctx.Err() != nil {
		return provider.Aborted(acc.content())
	}
	// Our own per-request timeout, not the caller's cancellation.
	if reqCtx != ctx && errors.Is(reqCtx.Err(), context.DeadlineExceeded) {
		text := fmt.Sprintf("request timed out after %s: %v", p.cfg.RequestTimeout, context.DeadlineExceeded)
		return interrupted(acc, text, statusOf(resp), headersOf(resp))
	}

	var aerr *sdk.Error
	if errors.As(err, &aerr) {
		if aerr.Response != nil {
			resp = aerr.Response
		}
		if status := statusOrCode(aerr.StatusCode, resp); status >= 400 {
			return provider.Failure(status, httpErrorText(aerr, status), headersOf(resp))
		}
		// An `event: error` inside a 200 stream.
		typ, msg := errorBody(aerr)
		text := joinNonEmpty(": ", typ, msg)
		if text == "" {
			text = "stream error event"
		}
		if !acc.started {
			text += " (stream error before message_start)"
			return provider.Failure(statusOf(resp), text, headersOf(resp))
		}
		return interrupted(acc, text+" (stream error after message_start)", statusOf(resp), headersOf(resp))
	}

	// An error status whose body could not be read.
	if status := statusOf(resp); status >= 400 {
		return provider.Failure(status, fmt.Sprintf("%d %s: %v", status, http.StatusText(status), err), headersOf(resp))
	}
	// A network failure (no response: status 0) or a stream that broke.
	text := err.Error()
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntaxErr) || errors.As(err, &typeErr) {
		text = "malformed stream event: " + text
	}
	return interrupted(acc, text, statusOf(resp), headersOf(resp))
}

// interrupted is an error message for a stream that ended abnormally: with
// the partial content and stop details stream_interrupted_after_content when
// output was already streamed, a plain error otherwise.
func interrupted(acc *accumulator, text string, status int, headers map[string]string) *messages.AssistantMessage {
	m := provider.Failure(status, text, headers)
	m.Content = acc.content()
	if retry.ContentHasOutput(m.Content) {
		m.StopDetails = &messages.StopDetails{Type: stopDetailInterrupted}
	}
	return m
}

func statusOrCode(code int, resp *http.Response) int {
	if code != 0 {
		return code
	}
	return statusOf(resp)
}

func statusOf(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}
