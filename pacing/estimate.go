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

// estimateWindow is how many recent answers of a model an estimate
// reads.
const estimateWindow = 64

// estimatePercentile is the share of those answers an estimate covers.
const estimatePercentile = 0.95

// OutputEstimator learns, per model, what its answers use: a turn that
// sets no max_tokens reserves the 95th percentile of its model's last 64
// answers' output tokens (DefaultOutputEstimate until one answered), and
// settles with what it used. It is not safe for concurrent use.
type OutputEstimator struct {
	models map[string]*recent[int64]
}

// Estimate is the output to reserve for a turn of model.
func (e *OutputEstimator) Estimate(model string) int64 {
	a := e.models[model]
	if a == nil || a.n == 0 {
		return DefaultOutputEstimate
	}
	return max(a.high(), 1)
}

// Observe takes the output tokens an answer of model used (a failed call,
// which reports none, teaches nothing).
func (e *OutputEstimator) Observe(model string, output int64) {
	if output > 0 {
		of(&e.models, model).add(output)
	}
}

// InputScale learns, per model, how the provider counts a turn's input
// against EstimateInput's bytes-a-token estimate: a tokenizer, the
// request's framing, a system prompt the adapter adds. A turn reserves
// its estimate times the 95th percentile of the ratios of its model's last
// 64 answers (reported over estimated), 1 until one answered, so that
// the budget runs out where the provider's does, not after it (issue 37:
// estimates a fifth short made 3.7 % of a storm's requests 429s of the
// tokens limit). It is not safe for concurrent use.
type InputScale struct {
	models map[string]*recent[float64]
}

// The ratios InputScale keeps are bounded: a reported count far from the
// estimate says more of an odd answer than of the model.
const (
	minInputRatio = 0.25
	maxInputRatio = 8
)

// Scale is the input to reserve for a turn of model estimated at
// estimate tokens.
func (s *InputScale) Scale(model string, estimate int64) int64 {
	a := s.models[model]
	if a == nil || a.n == 0 {
		return estimate
	}
	return int64(math.Ceil(float64(estimate) * a.high()))
}

// Observe takes the input tokens the provider reported for a turn of
// model estimated at estimate (a failed call, which reports none,
// teaches nothing).
func (s *InputScale) Observe(model string, estimate, reported int64) {
	if estimate > 0 && reported > 0 {
		of(&s.models, model).add(math.Min(maxInputRatio, math.Max(minInputRatio, float64(reported)/float64(estimate))))
	}
}

// recent is a model's last estimateWindow observations, a ring.
type recent[T int64 | float64] struct {
	v    [estimateWindow]T
	n    int // filled
	next int
}

// of is models' ring of model, made on first use.
func of[T int64 | float64](models *map[string]*recent[T], model string) *recent[T] {
	if *models == nil {
		*models = map[string]*recent[T]{}
	}
	r := (*models)[model]
	if r == nil {
		r = &recent[T]{}
		(*models)[model] = r
	}
	return r
}

func (r *recent[T]) add(v T) {
	r.v[r.next] = v
	r.next = (r.next + 1) % estimateWindow
	r.n = min(r.n+1, estimateWindow)
}

// high is the estimatePercentile of the ring (it holds some).
func (r *recent[T]) high() T {
	sorted := slices.Clone(r.v[:r.n])
	slices.Sort(sorted)
	return sorted[int(math.Ceil(estimatePercentile*float64(r.n)))-1]
}
