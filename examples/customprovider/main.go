// Command customprovider plugs a hand-written provider into MusePi: a
// small adapter for a non-streaming chat API (here the fake server's
// OpenAI-compatible endpoint with "stream": false), written against
// MusePi's Go types (musepi.Provider, registered with WithCustomProvider).
// A provider maps the API's failures to error messages carrying the HTTP
// status, the headers and the error text; the runtime classifies and
// retries them like those of the built-in adapters: here a 429 with
// retry-after: 1 is honoured.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider/fakellm"
)

// chatProvider calls POST {baseURL}/chat/completions without streaming.
type chatProvider struct {
	baseURL string
	client  *http.Client
}

// Stream sends the context and returns the whole answer at once
// (a non-streaming provider calls onDelta once, with all the text).
func (p *chatProvider) Stream(ctx context.Context, req musepi.ProviderRequest, onDelta func(musepi.Delta)) *musepi.AssistantMessage {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var msgs []message
	for _, e := range req.Context { // the conversation, oldest first
		switch {
		case e.User != nil:
			msgs = append(msgs, message{"user", e.User.Text})
		case e.Assistant != nil:
			msgs = append(msgs, message{"assistant", e.Assistant.Text()})
		}
	}
	body, _ := json.Marshal(map[string]any{"model": req.Model, "messages": msgs, "stream": false})
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, p.baseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return failure(0, err.Error(), nil)
	}
	httpReq.Header.Set("Authorization", "Bearer "+req.APIKey)
	httpReq.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(httpReq)
	if ctx.Err() != nil {
		return &musepi.AssistantMessage{StopReason: musepi.StopReasonAborted, ErrorMessage: "aborted"} // the session aborted the call
	}
	if err != nil {
		return failure(0, err.Error(), nil) // e.g. "connection refused": retried as transient
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return failure(0, err.Error(), nil)
	}
	if resp.StatusCode != http.StatusOK {
		headers := map[string]string{}
		for k := range resp.Header {
			headers[k] = resp.Header.Get(k)
		}
		return failure(resp.StatusCode, fmt.Sprintf("%d %s", resp.StatusCode, data), headers)
	}
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.Choices) == 0 {
		return failure(resp.StatusCode, fmt.Sprintf("malformed response: %s", data), nil)
	}
	text := out.Choices[0].Message.Content
	onDelta(musepi.Delta{Kind: "text", Text: text})
	return &musepi.AssistantMessage{StopReason: musepi.StopReasonStop, Content: []musepi.Block{musepi.TextBlock{Text: text}}}
}

// failure is a failed turn: the retry policy reads its status, headers and
// the provider's own error text.
func failure(status int, text string, headers map[string]string) *musepi.AssistantMessage {
	return &musepi.AssistantMessage{StopReason: musepi.StopReasonError, HTTPStatus: status, ErrorMessage: text, Headers: headers}
}

// ResetSession: this API keeps no per-session state.
func (p *chatProvider) ResetSession(string) {}

func main() {
	llm := fakellm.New(&fakellm.Scenario{
		Rules: []fakellm.Rule{{Match: fakellm.Match{First: 1},
			Respond: fakellm.Respond{Preset: "rate_limit", Headers: map[string]string{"retry-after": "1"}}}},
		Default: &fakellm.Respond{Text: "Answered by the custom provider."},
	})
	base, err := llm.Start("127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer llm.Close()

	rt, err := musepi.NewRuntime(musepi.WithCustomProvider("mine",
		&chatProvider{baseURL: base + "/v1", client: &http.Client{Timeout: time.Minute}},
		musepi.Credential{Name: "main", APIKey: "sk-custom"}))
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Shutdown(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := rt.NewSession(ctx, musepi.WithModel("mine/small-model"))
	if err != nil {
		log.Fatal(err)
	}
	s.Subscribe(func(e musepi.Event) {
		if ev, ok := e.(musepi.AutoRetryStart); ok {
			fmt.Printf("retry %d (%s) in %v, as the provider's retry-after asked\n", ev.Attempt, ev.ErrorClass, ev.Delay.Round(time.Second))
		}
	})
	res, err := s.Prompt(ctx, "Hello?")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("answer: %s\n", res.Text())
}
