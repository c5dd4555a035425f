package musepi

import (
	"context"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// Provider is a model provider written against the Go types, for
// WithCustomProvider. Stream runs one turn: it calls onDelta with each
// piece of output as it streams and returns the final message, never nil.
// A failure is a message with StopReasonError, its ErrorMessage the
// provider's own text and HTTPStatus and Headers as received (the retry
// policy classifies them); when ctx ends it returns StopReasonAborted.
//
// A Provider that knows whose API it speaks may also have a method
// GenAIProviderName() string, returning that provider as OpenTelemetry's
// GenAI semantic conventions name it ("openai", "aws.bedrock", ...): the
// runtime's metrics and traces report it as gen_ai.provider.name, and
// "_OTHER" for a provider without it.
//
// The runtime calls every provider through provider.Provider, the same
// interface on the wire types (package messages) that the built-in
// adapters implement without a conversion; WithCustomProvider adapts a
// Provider to it, converting each turn's context and answer (wire.go).
type Provider interface {
	Stream(ctx context.Context, req ProviderRequest, onDelta func(Delta)) *AssistantMessage
	// ResetSession drops anything cached for the session (a stateful
	// API's previous response id, say) after a stale-replay error.
	ResetSession(sessionID string)
}

// ProviderRequest is one turn asked of a Provider.
type ProviderRequest struct {
	SessionID  string
	Model      string // the model id within the provider ("gpt-4o")
	Credential string // the credential the session uses now
	APIKey     string // that credential's key ("" without credentials)
	// Context is the conversation to send, oldest first.
	Context []Entry
	// Tools are the runtime's tools, shared with its other turns: a
	// provider only reads them.
	Tools []ToolSpec
	// Thinking is the session's thinking level: "" (off), "minimal",
	// "low", "medium", "high" or "xhigh".
	Thinking string
}

// ToolSpec is a tool the model may call, as a provider sends it: its
// name, description and arguments' JSON schema.
type ToolSpec = provider.ToolSpec

// Delta is a piece of streamed output: its Kind ("text", "thinking" or
// "tool_call") and Text.
type Delta = provider.Delta

// WithCustomProvider registers p, written against the Go types, under
// name with its credentials, as WithProvider does for the built-in
// adapters.
func WithCustomProvider(name string, p Provider, creds ...Credential) Option {
	if p == nil {
		return WithProvider(name, nil, creds...) // refused there, naming the option
	}
	return WithProvider(name, nativeProvider{p}, creds...)
}

// nativeProvider runs a Provider behind the runtime's wire interface.
type nativeProvider struct{ p Provider }

func (n nativeProvider) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta)) *messages.AssistantMessage {
	msg := n.p.Stream(ctx, ProviderRequest{
		SessionID: req.SessionID, Model: req.Model, Credential: req.Credential, APIKey: req.APIKey,
		Context: fromWireEntries(req.Context), Tools: req.Tools, Thinking: string(req.Thinking),
	}, onDelta)
	if msg == nil {
		return nil // the runtime turns it into a failed turn
	}
	return toWireAssistant(msg)
}

func (n nativeProvider) ResetSession(sessionID string) { n.p.ResetSession(sessionID) }

// GenAIProviderName is the custom provider's, if it has the method ("":
// it does not say).
func (n nativeProvider) GenAIProviderName() string {
	if g, ok := n.p.(interface{ GenAIProviderName() string }); ok {
		return g.GenAIProviderName()
	}
	return ""
}
