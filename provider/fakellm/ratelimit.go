package fakellm

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Rate limits: per API key and model, a requests-per-minute and a
// tokens-per-minute token bucket, the providers' rate-limit headers on
// every answer, and their 429 when a bucket cannot take a request.

// Limit is a rate limit of a Scenario: a token bucket of RPM requests and
// one of TPM tokens per minute, kept for each API key and model it applies
// to. A bucket holds at most its per-minute limit and refills continuously
// at limit/60 per second. RPM or TPM 0 means no limit of that kind.
type Limit struct {
	// Key and Model select the requests the limit applies to ("" matches
	// any); the first matching Limit of Scenario.Limits applies. Even a
	// Limit that matches every key keeps separate buckets per key and
	// model.
	Key   string `json:"key,omitempty"`
	Model string `json:"model,omitempty"`
	RPM   int64  `json:"rpm,omitempty"`
	TPM   int64  `json:"tpm,omitempty"`
}

// DefaultMaxTokens is the output a request reserves against a
// tokens-per-minute limit when it asks for no limit of its own
// (max_completion_tokens or max_tokens, max_output_tokens, max_tokens).
const DefaultMaxTokens = 1024

// MaxLimit bounds Limit.RPM and Limit.TPM.
const MaxLimit = 1_000_000_000

// Kinds of limits, as Stats.ByLimit and the OpenAI error type name them.
const (
	LimitRequests = "requests"
	LimitTokens   = "tokens"
)

// org is the organization the rate-limit messages name.
const org = "org-fakellm"

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
		}{{"rpm", l.RPM}, {"tpm", l.TPM}} {
			if f.v < 0 || f.v > MaxLimit {
				return errAt(path+"."+f.name, "must be 0-%d, got %d", int64(MaxLimit), f.v)
			}
		}
		if l.RPM == 0 && l.TPM == 0 {
			return errAt(path, "needs rpm or tpm (above 0)")
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

// bucket is a token bucket of a per-minute limit.
type bucket struct {
	limit float64
	level float64 // what it holds; below 0 when answers used more than they reserved
	at    time.Time
}

func newBucket(limit int64, now time.Time) *bucket {
	if limit <= 0 {
		return nil
	}
	return &bucket{limit: float64(limit), level: float64(limit), at: now}
}

// rate is the refill in units per second.
func (b *bucket) rate() float64 { return b.limit / 60 }

// refill adds what flowed in since the last refill, up to the limit.
func (b *bucket) refill(now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.level = min(b.limit, b.level+d.Seconds()*b.rate())
		b.at = now
	}
}

// remaining is what the bucket holds, in whole units.
func (b *bucket) remaining() int64 { return int64(max(0, math.Floor(b.level+1e-6))) }

// until is how long the bucket takes to hold n, to the microsecond (0 when
// it does).
func (b *bucket) until(n float64) time.Duration {
	if b.level >= n {
		return 0
	}
	us := math.Round((n - b.level) / b.rate() * 1e6)
	return time.Duration(us) * time.Microsecond
}

// untilFull is how long the bucket takes to be full again.
func (b *bucket) untilFull() time.Duration { return b.until(b.limit) }

// limitState is the buckets of one API key and model (nil: no limit of
// that kind).
type limitState struct {
	requests, tokens *bucket
}

// limitKey names the buckets of one API key and model.
type limitKey struct{ key, model string }

// refill refills both buckets to now.
func (st *limitState) refill(now time.Time) {
	for _, b := range []*bucket{st.requests, st.tokens} {
		if b != nil {
			b.refill(now)
		}
	}
}

// overLimit is a bucket that cannot take a request.
type overLimit struct {
	kind      string // LimitRequests or LimitTokens
	b         *bucket
	requested int64
	wait      time.Duration // until it can; 0 when never (larger than the limit)
}

// take takes one request and cost tokens from the buckets, or nothing and
// reports the bucket that cannot take them (the one with the longest
// wait; first one larger than its limit).
func (st *limitState) take(cost int64) *overLimit {
	var worst *overLimit
	for _, c := range []overLimit{{kind: LimitRequests, b: st.requests, requested: 1}, {kind: LimitTokens, b: st.tokens, requested: cost}} {
		if c.b == nil {
			continue
		}
		if float64(c.requested) > c.b.limit {
			return &c
		}
		if c.wait = c.b.until(float64(c.requested)); c.wait > 0 && (worst == nil || c.wait > worst.wait) {
			worst = &c
		}
	}
	if worst != nil {
		return worst
	}
	if st.requests != nil {
		st.requests.level--
	}
	if st.tokens != nil {
		st.tokens.level -= float64(cost)
	}
	return nil
}

// rateGrant is what an admitted request took, corrected once answered.
type rateGrant struct {
	st       *limitState
	reserved int64 // output tokens reserved
}

// maxReserve bounds the output a request reserves, so the token cost
// cannot overflow.
const maxReserve = 1 << 40

// reservedOutput is the output req reserves: the output limit its API
// reads (Chat: max_completion_tokens, else max_tokens; Responses:
// max_output_tokens; Anthropic: max_tokens), else DefaultMaxTokens.
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
		return DefaultMaxTokens
	}
	return min(max(0, *n), maxReserve)
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
		st = &limitState{requests: newBucket(l.RPM, now), tokens: newBucket(l.TPM, now)}
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

// takeRate takes req's request and tokens from the buckets of its key and
// model. It returns what it took, to settle once answered, or, when a
// bucket cannot take them, the 429 to answer instead (and takes nothing);
// then the rate-limit headers of the answer. All nil when no limit
// applies.
func (s *Server) takeRate(req *apiRequest) (*rateGrant, *errSpec, map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	st := s.limitsOf(req, now)
	if st == nil {
		return nil, nil, nil
	}
	reserved := req.reservedOutput()
	over := st.take(int64(req.inputTokens) + reserved)
	h := st.headers(req.api, now)
	if over == nil {
		return &rateGrant{st: st, reserved: reserved}, nil, h
	}
	s.stats.byLimit[over.kind]++
	over.retryHeaders(req.api, h)
	e := over.spec(req)
	return nil, &e, h
}

// settle corrects the tokens bucket of an answered request: the output it
// reserved goes back, the output it answered is taken.
func (s *Server) settle(g *rateGrant, output int) {
	if g == nil || g.st.tokens == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := g.st.tokens
	b.refill(s.clock())
	b.level = min(b.limit, b.level+float64(g.reserved-int64(output)))
}

// namedBucket is a bucket under the name its headers give it.
type namedBucket struct {
	name string
	b    *bucket
}

// headers are the rate-limit headers api sends for st: OpenAI's
// x-ratelimit-{limit,remaining,reset}-{requests,tokens}, Anthropic's
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}
// (the input and output ones report the one tokens bucket). A kind
// without a limit sends none.
func (st *limitState) headers(api string, now time.Time) map[string]string {
	h := map[string]string{}
	kinds := []namedBucket{{LimitRequests, st.requests}, {LimitTokens, st.tokens}}
	if isAnthropic(api) {
		kinds = append(kinds, namedBucket{"input-tokens", st.tokens}, namedBucket{"output-tokens", st.tokens})
	}
	for _, k := range kinds {
		if k.b == nil {
			continue
		}
		limit, remaining := strconv.FormatFloat(k.b.limit, 'f', 0, 64), strconv.FormatInt(k.b.remaining(), 10)
		if isAnthropic(api) {
			prefix := "anthropic-ratelimit-" + k.name
			h[prefix+"-limit"], h[prefix+"-remaining"] = limit, remaining
			h[prefix+"-reset"] = anthropicReset(now, k.b.untilFull())
		} else {
			h["x-ratelimit-limit-"+k.name], h["x-ratelimit-remaining-"+k.name] = limit, remaining
			h["x-ratelimit-reset-"+k.name] = openAIDuration(k.b.untilFull())
		}
	}
	return h
}

// openAIDuration is d as OpenAI writes durations ("6m0s", "20ms",
// "1.5s"): Go's format of d rounded up to the millisecond.
func openAIDuration(d time.Duration) string {
	if r := d.Truncate(time.Millisecond); r < d {
		d = r + time.Millisecond
	}
	return d.String()
}

// anthropicReset is the RFC 3339 UTC time d after now, rounded up to the
// second, as Anthropic writes its reset times.
func anthropicReset(now time.Time, d time.Duration) string {
	t := now.Add(d).UTC()
	if r := t.Truncate(time.Second); r.Before(t) {
		t = r.Add(time.Second)
	}
	return t.Format(time.RFC3339)
}

// retryHeaders adds the retry hints of a refusal: retry-after in whole
// seconds rounded up, and for OpenAI retry-after-ms too. A request larger
// than the limit gets none: waiting cannot help it.
func (o *overLimit) retryHeaders(api string, h map[string]string) {
	if o.wait <= 0 {
		return
	}
	h["retry-after"] = strconv.FormatInt(int64(math.Ceil(o.wait.Seconds())), 10)
	if !isAnthropic(api) {
		h["retry-after-ms"] = strconv.FormatInt(int64(math.Ceil(float64(o.wait)/float64(time.Millisecond))), 10)
	}
}

// spec is the 429 of a refusal, in the words each provider uses.
func (o *overLimit) spec(req *apiRequest) errSpec {
	limit := int64(o.b.limit)
	if isAnthropic(req.api) {
		return errSpec{status: 429, typ: "rate_limit_error", msg: fmt.Sprintf(
			"This request would exceed the rate limit for your organization (%s) of %s %s per minute. "+
				"For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. "+
				"Please reduce the prompt length or the maximum tokens requested, or try again later. "+
				"You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase.",
			org, thousands(limit), o.kind)}
	}
	per := "requests per min (RPM)"
	if o.kind == LimitTokens {
		per = "tokens per min (TPM)"
	}
	const visit = " Visit https://platform.openai.com/account/rate-limits to learn more."
	msg := fmt.Sprintf("Rate limit reached for %s in organization %s on %s: Limit %d, Used %d, Requested %d. Please try again in %s.",
		req.Model, org, per, limit, limit-o.b.remaining(), o.requested, openAIDuration(o.wait)) + visit
	if o.wait <= 0 {
		msg = fmt.Sprintf("Request too large for %s in organization %s on %s: Limit %d, Requested %d. "+
			"The input or output tokens must be reduced in order to run successfully.", req.Model, org, per, limit, o.requested) + visit
	}
	return errSpec{status: 429, typ: o.kind, code: "rate_limit_exceeded", msg: msg}
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
