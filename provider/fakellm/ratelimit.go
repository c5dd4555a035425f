package fakellm

import (
	"fmt"
	"time"
)

// Rate limits: per API key and model, token buckets of requests and tokens
// per minute (each enforced over a window of a minute or shorter), the
// providers' rate-limit headers on every answer, and their 429 when a
// bucket cannot take a request. Every rule follows the providers' pages,
// quoted where it is applied (see also README.md, "Rate limits").

// Limit is a rate limit of a Scenario, kept for each API key and model it
// applies to. A limit of 0 means no limit of that kind.
//
// OpenAI counts requests (RPM) and tokens, input and output together
// (TPM): "Rate limits are measured in five ways: RPM (requests per
// minute), RPD (requests per day), TPM (tokens per minute), TPD (tokens
// per day), and IPM (images per minute)"
// (https://platform.openai.com/docs/guides/rate-limits). It ignores ITPM
// and OTPM.
//
// Anthropic counts requests, input tokens and output tokens separately:
// "Our rate limits for the Messages API are measured in requests per
// minute (RPM), input tokens per minute (ITPM), and output tokens per
// minute (OTPM) for each model class"
// (https://platform.claude.com/docs/en/api/rate-limits). TPM is for it a
// limit of total tokens, input plus output, as a Workspace may have one
// (same page: "you might limit one Workspace to 30,000 total tokens per
// minute").
type Limit struct {
	// Key and Model select the requests the limit applies to ("" matches
	// any); the first matching Limit of Scenario.Limits applies. Even a
	// Limit that matches every key keeps separate buckets per key and
	// model.
	Key   string `json:"key,omitempty"`
	Model string `json:"model,omitempty"`
	// RPM is requests per minute (both providers).
	RPM int64 `json:"rpm,omitempty"`
	// TPM is tokens per minute: OpenAI's input and output; Anthropic's
	// total of input and output.
	TPM int64 `json:"tpm,omitempty"`
	// ITPM and OTPM are Anthropic's input and output tokens per minute.
	ITPM int64 `json:"itpm,omitempty"`
	OTPM int64 `json:"otpm,omitempty"`
	// WindowMs enforces each per-minute limit L over windows of this many
	// ms (1 to MaxWindowMs): a bucket holds at most L·WindowMs/60000 and
	// refills at L/60 a second, so a burst a minute would take is refused.
	// 0 (or MaxWindowMs) enforces the whole minute. The headers report the
	// per-minute limit either way.
	WindowMs int64 `json:"window_ms,omitempty"`
}

// DefaultMaxTokens was the output fakellm reserved against a tokens limit
// for a request that asks for no output limit.
//
// Deprecated: no provider's page says such a request reserves anything,
// and OpenAI's says it is charged its own tokens ("the maximum of
// max_tokens and the estimated number of tokens based on the character
// count of your request"), so fakellm reserves nothing and no longer
// reads this. It stays for the callers that still name it.
const DefaultMaxTokens = 1024

// MaxLimit bounds Limit.RPM, TPM, ITPM and OTPM.
const MaxLimit = 1_000_000_000

// MaxWindowMs bounds Limit.WindowMs: a minute.
const MaxWindowMs = 60_000

// Kinds of limits, as Stats.ByLimit and the OpenAI error type name them.
const (
	LimitRequests     = "requests"
	LimitTokens       = "tokens"
	LimitInputTokens  = "input_tokens"
	LimitOutputTokens = "output_tokens"
)

// org is the organization the rate-limit messages name.
const org = "org-fakellm"

// window is the limit's enforcement window (0: the minute).
func (l *Limit) window() time.Duration { return time.Duration(l.WindowMs) * time.Millisecond }

// matches reports whether the limit applies to key and model.
func (l *Limit) matches(key, model string) bool {
	return (l.Key == "" || l.Key == key) && (l.Model == "" || l.Model == model)
}

// covers reports whether l matches every request other matches, so that
// other, later in the list, would never apply.
func (l *Limit) covers(other *Limit) bool {
	return (l.Key == "" || l.Key == other.Key) && (l.Model == "" || l.Model == other.Model)
}

// validateLimits checks the limits: numbers in range, and none shadowed
// by an earlier one.
func validateLimits(limits []Limit) error {
	for i := range limits {
		l := &limits[i]
		path := fmt.Sprintf("limits[%d]", i)
		for _, f := range []struct {
			name string
			v    int64
		}{{"rpm", l.RPM}, {"tpm", l.TPM}, {"itpm", l.ITPM}, {"otpm", l.OTPM}} {
			if f.v < 0 || f.v > MaxLimit {
				return errAt(path+"."+f.name, "must be 0-%d, got %d", int64(MaxLimit), f.v)
			}
		}
		if l.WindowMs < 0 || l.WindowMs > MaxWindowMs {
			return errAt(path+".window_ms", "must be 0-%d, got %d", int64(MaxWindowMs), l.WindowMs)
		}
		if l.RPM == 0 && l.TPM == 0 && l.ITPM == 0 && l.OTPM == 0 {
			return errAt(path, "needs rpm, tpm, itpm or otpm (above 0)")
		}
		for j := range limits[:i] {
			if limits[j].covers(l) {
				return errAt(path, "never applies: limits[%d] (key %q, model %q) matches every request it matches (list the more specific limit first)",
					j, limits[j].Key, limits[j].Model)
			}
		}
	}
	return nil
}

// limitFor is the first limit that applies to key and model, or nil.
func (sc *Scenario) limitFor(key, model string) *Limit {
	for i := range sc.Limits {
		if sc.Limits[i].matches(key, model) {
			return &sc.Limits[i]
		}
	}
	return nil
}

// limitKey names the buckets of one API key and model.
type limitKey struct{ key, model string }

// maxReserve bounds the output a request reserves, so that token costs
// cannot overflow.
const maxReserve = 1 << 40

// reservedOutput is the output limit req asks for, taken at admission:
// Chat max_completion_tokens, else max_tokens; Responses
// max_output_tokens; Anthropic max_tokens. 0 when it asks for none: OpenAI
// then counts the request's own tokens only ("Your rate limit is
// calculated as the maximum of max_tokens and the estimated number of
// tokens based on the character count of your request",
// https://platform.openai.com/docs/guides/rate-limits).
func (r *apiRequest) reservedOutput() int64 {
	var n *int64
	switch r.api {
	case APIOpenAIChat:
		n = r.MaxCompletionTokens
		if n == nil {
			n = r.MaxTokens
		}
	case APIOpenAIResponses:
		n = r.MaxOutputTokens
	default:
		n = r.MaxTokens
	}
	if n == nil {
		return 0
	}
	return min(max(0, *n), maxReserve)
}

// charges is what req takes from st at admission.
//
// One request from RPM. OpenAI's TPM: the estimated input plus the output
// limit, "contexts (prompts+max_completion_tokens)"
// (https://help.openai.com/en/articles/6891753). (The guide's "the maximum
// of max_tokens and the estimated number of tokens" reads otherwise; the
// sum is the stricter reading, and what the help article says.)
//
// Anthropic (https://platform.claude.com/docs/en/api/rate-limits): ITPM
// the estimated input ("ITPM rate limits are estimated at the beginning
// of each request"; the estimate is also the usage fakellm reports, so
// nothing is adjusted), OTPM max_tokens ("OTPM rate limits are estimated
// based on max_tokens at the beginning of each request"), the total (TPM)
// both.
func (st *limitState) charges(req *apiRequest) []charge {
	in, out := float64(req.inputTokens), float64(req.reservedOutput())
	all := []charge{{LimitRequests, st.requests, 1}, {LimitTokens, st.tokens, in + out}}
	if isAnthropic(req.api) {
		all = append(all, charge{LimitInputTokens, st.input, in}, charge{LimitOutputTokens, st.output, out})
	}
	cs := all[:0]
	for _, c := range all {
		if c.b != nil {
			cs = append(cs, c)
		}
	}
	return cs
}

// rateGrant is what an admitted request took, settled once answered.
type rateGrant struct {
	reserved int64     // output tokens taken at admission
	refund   bool      // the unused part of reserved goes back (Anthropic)
	adjust   []*bucket // the buckets the output was taken from
}

// grant is what req, admitted, settles at the end: the output it
// reserved, from TPM (and Anthropic's OTPM).
//
// Anthropic gives back what the answer did not use: "the estimate is
// adjusted at the end of the request to reflect the actual number of
// output tokens used" (https://platform.claude.com/docs/en/api/rate-limits).
// OpenAI does not: its guide tells clients to "Reduce the max_tokens to
// match the size of your completions", for "Your rate limit is calculated
// as the maximum of max_tokens and the estimated number of tokens"
// (https://platform.openai.com/docs/guides/rate-limits), and nowhere that
// unused max_tokens come back. Output beyond the reservation is taken at
// the end by both: the tokens were used.
func (st *limitState) grant(req *apiRequest) *rateGrant {
	g := &rateGrant{reserved: req.reservedOutput(), refund: isAnthropic(req.api)}
	if st.tokens != nil {
		g.adjust = append(g.adjust, st.tokens)
	}
	if st.output != nil && g.refund {
		g.adjust = append(g.adjust, st.output)
	}
	return g
}

// limitsOf is the buckets of req's key and model refilled to now, made on
// first use; nil when no limit applies. The caller holds s.mu.
func (s *Server) limitsOf(req *apiRequest, now time.Time) *limitState {
	if req.key == "" || req.Model == "" || s.sc == nil {
		return nil
	}
	l := s.sc.limitFor(req.key, req.Model)
	if l == nil {
		return nil
	}
	k := limitKey{req.key, req.Model}
	st := s.limits[k]
	if st == nil {
		st = newLimitState(l, now)
		s.limits[k] = st
	}
	st.refill(now)
	return st
}

// peekRate is the rate-limit headers of req's key and model, taking
// nothing from the buckets; nil when no limit applies.
func (s *Server) peekRate(req *apiRequest) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	st := s.limitsOf(req, now)
	if st == nil {
		return nil
	}
	return st.headers(req.api, now)
}

// takeRate takes req's charges from the buckets of its key and model. It
// returns what it took, to settle once answered, or, when a bucket cannot
// take them, the 429 to answer instead; then the rate-limit headers of
// the answer, sent before its body. All nil when no limit applies.
//
// A refused OpenAI request still counts as a request: "Note that
// unsuccessful requests contribute to your per-minute limit, so
// continuously resending a request won't work"
// (https://platform.openai.com/docs/guides/rate-limits). Anthropic's page
// says no such thing, so its refusals take nothing.
func (s *Server) takeRate(req *apiRequest) (*rateGrant, *errSpec, map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	st := s.limitsOf(req, now)
	if st == nil {
		return nil, nil, nil
	}
	cs := st.charges(req)
	over := admit(cs)
	if over == nil {
		return st.grant(req), nil, st.headers(req.api, now)
	}
	if !isAnthropic(req.api) && st.requests != nil {
		st.requests.owe(1)
		if over.wait > 0 {
			over.wait = waitFor(cs)
		}
	}
	s.stats.byLimit[over.kind]++
	h := st.headers(req.api, now)
	over.retryHeaders(req.api, h)
	e := over.spec(req)
	return nil, &e, h
}

// settle corrects the buckets of an answered request that output tokens:
// output beyond the reservation is taken; on Anthropic, the reservation
// the answer did not use goes back.
func (s *Server) settle(g *rateGrant, output int) {
	if g == nil || len(g.adjust) == 0 {
		return
	}
	d := float64(g.reserved - int64(output))
	if !g.refund {
		d = min(0, d)
	}
	if d == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	for _, b := range g.adjust {
		b.refill(now)
		b.add(d)
	}
}
