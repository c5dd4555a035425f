package pacing

import (
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// BytesPerToken is the estimate of input tokens: the context's encoded
// bytes over this, plus MessageTokens per entry and the tools' specs. No
// maintained Go tokenizer covers both providers' current models offline;
// 4 bytes a token is the usual rule of thumb for English text and code,
// and the provider's answer corrects the budget.
const BytesPerToken = 4

// MessageTokens is what each message of the context adds to its text (the
// role and the framing, as OpenAI counts them).
const MessageTokens = 4

// DefaultOutputBound is a turn's output bound when its provider does not
// say its max_tokens (provider.OutputBounded).
const DefaultOutputBound = 4096

// EstimateInput estimates the input tokens of a turn on context with
// tools.
func EstimateInput(context []*messages.Entry, tools []provider.ToolSpec) int64 {
	var n int
	for _, e := range context {
		n += proto.Size(e)
	}
	for _, t := range tools {
		n += len(t.Name) + len(t.Description) + len(t.SchemaJSON)
	}
	return int64((n+BytesPerToken-1)/BytesPerToken + MessageTokens*len(context))
}

// OutputBound is p's max_tokens, or DefaultOutputBound.
func OutputBound(p provider.Provider) int64 {
	if b, ok := p.(provider.OutputBounded); ok {
		if n := b.MaxOutputTokens(); n > 0 {
			return n
		}
	}
	return DefaultOutputBound
}
