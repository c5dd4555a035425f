package pacing

import (
	"math"
	"slices"

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

// DefaultOutputEstimate is what a turn whose provider sets no max_tokens
// reserves of output before its model's answers have taught an estimate
// (OutputEstimator): a long answer of a chat model, far below the 4,096
// or more a max_tokens would bound, which made a paced turn reserve
// several times what it used.
const DefaultOutputEstimate = 1024

// OutputBound is p's max_tokens, and whether it sets one (else pacing
// reserves an estimate: OutputEstimator).
func OutputBound(p provider.Provider) (int64, bool) {
	if b, ok := p.(provider.OutputBounded); ok {
		if n := b.MaxOutputTokens(); n > 0 {
			return n, true
		}
	}
	return 0, false
}

// estimateWindow is how many recent answers of a model the estimate
// reads.
const estimateWindow = 64

// estimatePercentile is the share of those answers the estimate covers.
const estimatePercentile = 0.95

// OutputEstimator learns, per model, what its answers use: a turn that
// sets no max_tokens reserves the 95th percentile of its model's last 64
// answers' output tokens (DefaultOutputEstimate until one answered), and
// settles with what it used. It is not safe for concurrent use.
type OutputEstimator struct {
	models map[string]*answers
}

// answers are a model's recent output counts, a ring.
type answers struct {
	out  [estimateWindow]int64
	n    int // filled
	next int
}

// Estimate is the output to reserve for a turn of model.
func (e *OutputEstimator) Estimate(model string) int64 {
	a := e.models[model]
	if a == nil || a.n == 0 {
		return DefaultOutputEstimate
	}
	sorted := slices.Clone(a.out[:a.n])
	slices.Sort(sorted)
	return max(sorted[int(math.Ceil(estimatePercentile*float64(a.n)))-1], 1)
}

// Observe takes the output tokens an answer of model used (a failed call,
// which reports none, teaches nothing).
func (e *OutputEstimator) Observe(model string, output int64) {
	if output <= 0 {
		return
	}
	if e.models == nil {
		e.models = map[string]*answers{}
	}
	a := e.models[model]
	if a == nil {
		a = &answers{}
		e.models[model] = a
	}
	a.out[a.next] = output
	a.next = (a.next + 1) % estimateWindow
	a.n = min(a.n+1, estimateWindow)
}
