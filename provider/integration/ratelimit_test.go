package integration

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go/v3"
	oaioption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider/fakellm"
)

// sdkCall is one API called through its official SDK; into receives the
// HTTP response.
type sdkCall struct {
	api     string
	call    func(into **http.Response) error
	headers []string // the headers of the answer: limit, remaining, reset
}

// sdkCalls calls each API with its SDK, without retries, each with a model
// of its own (so each has buckets of its own).
func sdkCalls(ctx context.Context, base string, client *http.Client) []sdkCall {
	oc := oai.NewClient(oaioption.WithBaseURL(base+"/v1"), oaioption.WithAPIKey("key-main"),
		oaioption.WithHTTPClient(client), oaioption.WithMaxRetries(0))
	ac := ant.NewClient(antoption.WithBaseURL(base), antoption.WithAPIKey("key-main"),
		antoption.WithHTTPClient(client), antoption.WithMaxRetries(0))
	openAIHeaders := []string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"}
	return []sdkCall{
		{fakellm.APIOpenAIChat, func(into **http.Response) error {
			_, err := oc.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "chat", MaxCompletionTokens: oai.Int(100),
				Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}}, oaioption.WithResponseInto(into))
			return err
		}, openAIHeaders},
		{fakellm.APIOpenAIResponses, func(into **http.Response) error {
			_, err := oc.Responses.New(ctx, responses.ResponseNewParams{Model: "responses", MaxOutputTokens: oai.Int(100),
				Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("hi")}}, oaioption.WithResponseInto(into))
			return err
		}, openAIHeaders},
		{fakellm.APIAnthropic, func(into **http.Response) error {
			_, err := ac.Messages.New(ctx, ant.MessageNewParams{Model: "claude", MaxTokens: 100,
				Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("hi"))}}, antoption.WithResponseInto(into))
			return err
		}, []string{"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"}},
	}
}

// TestRateLimitSDKs reads fakellm's rate limits with the official SDKs:
// the headers of an answer, then a bucket's 429 as each SDK's own error,
// with its type, code and retry hints.
func TestRateLimitSDKs(t *testing.T) {
	t.Parallel()
	srv := startServer(t, &fakellm.Scenario{Limits: []fakellm.Limit{{RPM: 1, TPM: 100000}}})
	client, _ := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, c := range sdkCalls(ctx, srv.base, client) {
		t.Run(c.api, func(t *testing.T) {
			var resp *http.Response
			if err := c.call(&resp); err != nil {
				t.Fatal(err)
			}
			h := resp.Header
			limit, remaining, reset := h.Get(c.headers[0]), h.Get(c.headers[1]), h.Get(c.headers[2])
			if limit != "1" || remaining != "0" || !wellFormedReset(c.api, reset) {
				t.Errorf("headers %s=%q %s=%q %s=%q", c.headers[0], limit, c.headers[1], remaining, c.headers[2], reset)
			}
			checkSDKRefusal(t, c.api, c.call(&resp))
		})
	}
	if st := srv.Stats(); st.ByLimit[fakellm.LimitRequests] != 3 || st.ByStatus["429"] != 3 {
		t.Errorf("stats %+v", st)
	}
}

// checkSDKRefusal checks that err is the SDK's error for a 429 of the
// requests bucket (1 rpm), with its retry hints: a minute for Anthropic,
// two for OpenAI, whose refused request counts toward the limit too
// ("unsuccessful requests contribute to your per-minute limit",
// https://platform.openai.com/docs/guides/rate-limits).
func checkSDKRefusal(t *testing.T, api string, err error) {
	t.Helper()
	var retryAfter string
	want := "120"
	switch api {
	case fakellm.APIAnthropic:
		var e *ant.Error
		if !errors.As(err, &e) || e.StatusCode != 429 || e.Type() != ant.ErrorTypeRateLimitError {
			t.Fatalf("second call: %v, want a 429 rate_limit_error", err)
		}
		retryAfter, want = e.Response.Header.Get("Retry-After"), "60"
	default:
		var e *oai.Error
		if !errors.As(err, &e) || e.StatusCode != 429 || e.Type != "requests" || e.Code != "rate_limit_exceeded" {
			t.Fatalf("second call: %v, want a 429 of type requests, code rate_limit_exceeded", err)
		}
		retryAfter = e.Response.Header.Get("Retry-After")
		if ms, err := strconv.Atoi(e.Response.Header.Get("Retry-After-Ms")); err != nil || ms <= 60000 || ms > 120000 {
			t.Errorf("retry-after-ms %q", e.Response.Header.Get("Retry-After-Ms"))
		}
	}
	if retryAfter != want {
		t.Errorf("retry-after %q, want %s (1 rpm)", retryAfter, want)
	}
}

// wellFormedReset reports whether a reset header has its API's format:
// an RFC 3339 time (Anthropic) or a Go duration (OpenAI).
func wellFormedReset(api, v string) bool {
	if api == fakellm.APIAnthropic {
		_, err := time.Parse(time.RFC3339, v)
		return err == nil
	}
	d, err := time.ParseDuration(v)
	return err == nil && d > 0 && d <= time.Minute
}

// TestTooLargeForTheKeyIsNotRetried: through the OpenAI SDK, a prompt
// larger than its key's whole tokens-per-minute limit (OpenAI: "Request too
// large for ... Limit 500, Requested ...") goes out once, while the key's
// limits are not known yet; its refusal's headers tell the limit, and the
// retry is refused by pacing before it goes out: the prompt ends at once,
// not retried, naming the limit (issue 37: such a request was sent 11
// times in 48 s).
func TestTooLargeForTheKeyIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := startServer(t, &fakellm.Scenario{Limits: []fakellm.Limit{{RPM: 100, TPM: 500}}})
	p, _ := newProvider(t, openaiChat, srv.base, 10*time.Second)
	rt := newRuntime(t, musepi.WithProvider("oai", p, musepi.Credential{Name: "main", APIKey: "sk-test"}),
		musepi.WithRetrySettings(fastRetry()), musepi.WithLogger(slog.New(slog.DiscardHandler)))
	s, err := rt.NewSession(context.Background(), musepi.WithModel("oai/gpt-test"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err = s.Prompt(ctx, strings.Repeat("a long prompt ", 300)) // about 1,000 tokens
	if err == nil || !strings.Contains(err.Error(), "more than any key") || !strings.Contains(err.Error(), "(key main: 500)") {
		t.Fatalf("prompt: %v; want pacing's too-large error naming the key's 500", err)
	}
	if st := srv.Stats(); st.Total != 1 || st.ByStatus["429"] != 1 {
		t.Errorf("the server saw %d requests (%v by status); want the first one alone, refused", st.Total, st.ByStatus)
	}
}
