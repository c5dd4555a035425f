package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	antoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	oai "github.com/openai/openai-go/v3"
	oaioption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/retry"
)

// A refusal keeps the provider's words (issue 25 item 2, spec 2): the
// error message of a refused turn, the errorMessage of the auto_retry_start
// it leads to and the finalError of a chain that ends on it are the error
// text the provider sent with the refusal, verbatim; without one, the
// explanation of its stop details; with neither, the adapter's default.

// refusalWords says which words a refusal scenario gives: an error text,
// stop details (category and explanation), both or neither.
type refusalWords struct {
	name             string
	errText, details bool
}

var refusalWordCases = []refusalWords{
	{"error text and stop details", true, true},
	{"stop details only", false, true},
	{"no words", false, false},
}

// respond is model's refusal: each model's words are its own, so an
// event can be traced to the turn it comes from.
func (w refusalWords) respond(model string) fakellm.Respond {
	r := fakellm.Respond{Refusal: "I can't help with that."}
	if w.errText {
		r.StopError = "Refusal (cyber): Classifier declined the turn of " + model + "."
	}
	if w.details {
		r.StopDetails = map[string]string{"type": "refusal", "category": "cyber", "explanation": "Classifier declined the turn of " + model + "."}
	}
	return r
}

// wantMessage is the error message of model's refusal on API k, from the
// words k carries: Chat both the error text and the stop details,
// Anthropic the stop details only, Responses neither.
func (w refusalWords) wantMessage(k kind, model string) string {
	r := w.respond(model)
	switch k.api {
	case fakellm.APIOpenAIChat:
		return firstNonEmpty(r.StopError, r.StopDetails["explanation"],
			"The response was stopped by the provider's content filter (finish_reason: content_filter)")
	case fakellm.APIAnthropic:
		return firstNonEmpty(r.StopDetails["explanation"], "the model refused to continue (stop_reason refusal)")
	}
	return "The response was stopped by the provider's content filter (incomplete_details.reason: content_filter)"
}

// wantDetails are the stop details of model's refusal on API k: the type
// and fields the API carries, else the adapter's type of a refusal.
func (w refusalWords) wantDetails(k kind, model string) *musepi.StopDetails {
	sent := w.respond(model).StopDetails
	switch {
	case k.api == fakellm.APIAnthropic && sent != nil:
		return &musepi.StopDetails{Type: retry.StopDetailRefusal, Fields: map[string]string{"category": sent["category"], "explanation": sent["explanation"]}}
	case k.api == fakellm.APIAnthropic:
		return &musepi.StopDetails{Type: retry.StopDetailRefusal}
	case k.api == fakellm.APIOpenAIChat && sent != nil:
		return &musepi.StopDetails{Type: sent["type"], Fields: map[string]string{"category": sent["category"], "explanation": sent["explanation"]}}
	}
	return &musepi.StopDetails{Type: retry.StopDetailSensitive}
}

func firstNonEmpty(texts ...string) string {
	for _, s := range texts {
		if s != "" {
			return s
		}
	}
	return ""
}

// TestRefusalKeepsProviderWords runs a refused turn on each API, through
// the real adapters and a session, for each set of words: with no fallback
// model to switch to, the prompt fails with the refusal's message and no
// retry event; with a fallback model that refuses too, auto_retry_start
// carries the first refusal's message and auto_retry_end's finalError the
// fallback's. The history keeps every refusal with its words.
func TestRefusalKeepsProviderWords(t *testing.T) {
	t.Parallel()
	for _, k := range allKinds {
		for _, w := range refusalWordCases {
			sc := &fakellm.Scenario{Rules: []fakellm.Rule{
				{Match: fakellm.Match{Model: "m1"}, Respond: w.respond("m1")},
				{Match: fakellm.Match{Model: "m2"}, Respond: w.respond("m2")},
			}}
			t.Run(k.name+"/"+w.name+"/no fallback model", func(t *testing.T) {
				t.Parallel()
				srv := startServer(t, sc)
				p, _ := newProvider(t, k, srv.base, 10*time.Second)
				settings := fastRetry()
				settings.ModelFallback = true // but no chain to fall back on
				rt := newRuntime(t, musepi.WithProvider("fake", p, musepi.Credential{Name: "main", APIKey: "key-main"}),
					musepi.WithRetrySettings(settings))
				s, events := newSession(t, rt, "fake/m1")

				msg, err := prompt(t, s, events, 1, "Something risky")
				want := w.wantMessage(k, "m1")
				wantPromptFailed(t, err, want, false)
				if msg.ErrorMessage != want {
					t.Errorf("error message %q, want %q", msg.ErrorMessage, want)
				}
				if d := w.wantDetails(k, "m1"); !reflect.DeepEqual(msg.StopDetails, d) {
					t.Errorf("stop details %+v, want %+v", msg.StopDetails, d)
				}
				expectLines(t, events.lines(retryEventTypes...), "agent_settled success=false")
				wantHistoryErrors(t, s, want)
			})
			t.Run(k.name+"/"+w.name+"/fallback model", func(t *testing.T) {
				t.Parallel()
				srv := startServer(t, sc)
				p, _ := newProvider(t, k, srv.base, 10*time.Second)
				s, events := newSession(t, newFallbackRuntime(t, p), "fake/m1")

				_, err := prompt(t, s, events, 1, "Something risky")
				first, last := w.wantMessage(k, "m1"), w.wantMessage(k, "m2")
				wantPromptFailed(t, err, last, true)
				expectLines(t, events.lines(retryEventTypes...),
					"retry_fallback_applied fake/m1 -> fake/m2 (default)",
					"auto_retry_start 1/3 delay=0ms class=classifier_refusal",
					fmt.Sprintf("auto_retry_end success=false attempt=1 error=%q", last),
					"agent_settled success=false",
				)
				if starts := events.starts(); starts[0].ErrorMessage != first {
					t.Errorf("auto_retry_start errorMessage %q, want %q", starts[0].ErrorMessage, first)
				}
				wantHistoryErrors(t, s, first, last)
			})
		}
	}
}

// wantPromptFailed checks that a prompt failed with detail as its final
// error, and as the final error of its retry chain when one was started.
func wantPromptFailed(t *testing.T, err error, detail string, chain bool) {
	t.Helper()
	var pe *musepi.PromptError
	if !errors.As(err, &pe) || !errors.Is(err, musepi.ErrPromptFailed) {
		t.Fatalf("prompt error %v, want a failed prompt", err)
	}
	if pe.Detail != detail {
		t.Errorf("prompt error detail %q, want %q", pe.Detail, detail)
	}
	switch {
	case chain && (pe.Retry == nil || pe.Retry.FinalError != detail):
		t.Errorf("retry error %+v, want finalError %q", pe.Retry, detail)
	case !chain && pe.Retry != nil:
		t.Errorf("retry error %+v, want none (no chain started)", pe.Retry)
	}
}

// wantHistoryErrors checks the error messages of the assistant entries of
// the session's history, in order.
func wantHistoryErrors(t *testing.T, s *musepi.Session, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	entries, err := s.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		if e.Assistant != nil {
			got = append(got, e.Assistant.ErrorMessage)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("history error messages %q, want %q", got, want)
	}
}

// TestRefusalWordsNonStreaming reads fakellm's non-streaming refusals with
// the official SDKs: the words are where each API keeps them in a whole
// response, as they are on its stream.
func TestRefusalWordsNonStreaming(t *testing.T) {
	t.Parallel()
	words := refusalWordCases[0].respond("m1")
	srv := startServer(t, &fakellm.Scenario{Default: &words})
	client, _ := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	openaiClient := oai.NewClient(oaioption.WithBaseURL(srv.base+"/v1"), oaioption.WithAPIKey("key-main"),
		oaioption.WithHTTPClient(client), oaioption.WithMaxRetries(0))

	t.Run("openai-chat", func(t *testing.T) {
		c, err := openaiClient.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model: "m1", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Something risky")}})
		if err != nil {
			t.Fatal(err)
		}
		var details map[string]string
		_ = json.Unmarshal([]byte(c.Choices[0].JSON.ExtraFields["stop_details"].Raw()), &details)
		var errObj struct{ Message string }
		_ = json.Unmarshal([]byte(c.JSON.ExtraFields["error"].Raw()), &errObj)
		if c.Choices[0].FinishReason != "content_filter" || !reflect.DeepEqual(details, words.StopDetails) || errObj.Message != words.StopError {
			t.Errorf("finish %q, stop_details %v, error %q; want content_filter, %v, %q",
				c.Choices[0].FinishReason, details, errObj.Message, words.StopDetails, words.StopError)
		}
	})
	t.Run("anthropic", func(t *testing.T) {
		c := ant.NewClient(antoption.WithBaseURL(srv.base), antoption.WithAPIKey("key-main"),
			antoption.WithHTTPClient(client), antoption.WithMaxRetries(0))
		m, err := c.Messages.New(ctx, ant.MessageNewParams{Model: "m1", MaxTokens: 100,
			Messages: []ant.MessageParam{ant.NewUserMessage(ant.NewTextBlock("Something risky"))}})
		if err != nil {
			t.Fatal(err)
		}
		d := m.StopDetails
		if m.StopReason != ant.StopReasonRefusal || string(d.Category) != words.StopDetails["category"] || d.Explanation != words.StopDetails["explanation"] {
			t.Errorf("stop %q, stop_details %s; want refusal with category %q, explanation %q",
				m.StopReason, d.RawJSON(), words.StopDetails["category"], words.StopDetails["explanation"])
		}
	})
	t.Run("openai-responses", func(t *testing.T) {
		r, err := openaiClient.Responses.New(ctx, responses.ResponseNewParams{Model: "m1",
			Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("Something risky")}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != responses.ResponseStatusIncomplete || r.IncompleteDetails.Reason != "content_filter" || r.JSON.Error.Valid() {
			t.Errorf("status %q, incomplete_details %q, error %s; want incomplete for content_filter, no error",
				r.Status, r.IncompleteDetails.Reason, r.Error.RawJSON())
		}
	})
}
