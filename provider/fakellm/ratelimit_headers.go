package fakellm

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// The rate-limit headers and 429s, in each provider's words. Headers are
// HTTP response headers, so a streamed answer sends them, with the state
// of the buckets at admission, before its first event.

// bucketReport is what the headers say of one limit: the per-minute
// limit, what remains of it and when it is full again.
type bucketReport struct {
	limit, remaining int64
	full             time.Duration
}

// report is b's headers' values (ok false for no bucket).
func (b *bucket) report() (bucketReport, bool) {
	if b == nil {
		return bucketReport{}, false
	}
	return bucketReport{int64(b.limit), b.remaining(), b.untilFull()}, true
}

// sumReports is the reports of several limits as one: the limits and
// what remains added up, full when the last of them is.
func sumReports(bs ...*bucket) (bucketReport, bool) {
	var sum bucketReport
	found := false
	for _, b := range bs {
		if r, ok := b.report(); ok {
			sum.limit, sum.remaining, sum.full = sum.limit+r.limit, sum.remaining+r.remaining, max(sum.full, r.full)
			found = true
		}
	}
	return sum, found
}

// headers are the rate-limit headers api sends for st; a kind without a
// limit sends none.
func (st *limitState) headers(api string, now time.Time) map[string]string {
	if isAnthropic(api) {
		return st.anthropicHeaders(now)
	}
	// "x-ratelimit-limit-requests: The maximum number of requests that are
	// permitted before exhausting the rate limit." "x-ratelimit-reset-
	// requests: The time until the rate limit (based on requests) resets to
	// its initial state." (the same for tokens;
	// https://platform.openai.com/docs/guides/rate-limits; its example:
	// limit 60, remaining 59, reset "1s").
	h := map[string]string{}
	for name, b := range map[string]*bucket{LimitRequests: st.requests, LimitTokens: st.tokens} {
		if r, ok := b.report(); ok {
			h["x-ratelimit-limit-"+name] = strconv.FormatInt(r.limit, 10)
			h["x-ratelimit-remaining-"+name] = strconv.FormatInt(r.remaining, 10)
			h["x-ratelimit-reset-"+name] = openAIDuration(r.full)
		}
	}
	return h
}

// anthropicHeaders are Anthropic's anthropic-ratelimit-<kind>-limit,
// -remaining and -reset (https://platform.claude.com/docs/en/api/rate-limits):
// "-reset: The time when the ... rate limit will be fully replenished,
// provided in RFC 3339 format"; the tokens remaining are "rounded to the
// nearest thousand" (requests are not). The tokens-* headers: "The
// anthropic-ratelimit-tokens-* headers display the values for the most
// restrictive limit currently in effect. For instance, if you have
// exceeded the Workspace per-minute token limit, the headers will contain
// the Workspace per-minute token rate limit values. If Workspace limits do
// not apply, the headers will return the total tokens remaining, where
// total is the sum of input and output tokens." So: the total limit (TPM)
// when there is one, else input and output added up.
func (st *limitState) anthropicHeaders(now time.Time) map[string]string {
	h := map[string]string{}
	put := func(name string, r bucketReport, round bool) {
		if round {
			r.remaining = nearestThousand(r.remaining)
		}
		prefix := "anthropic-ratelimit-" + name
		h[prefix+"-limit"], h[prefix+"-remaining"] = strconv.FormatInt(r.limit, 10), strconv.FormatInt(r.remaining, 10)
		h[prefix+"-reset"] = anthropicReset(now, r.full)
	}
	if r, ok := st.requests.report(); ok {
		put("requests", r, false)
	}
	if r, ok := st.input.report(); ok {
		put("input-tokens", r, true)
	}
	if r, ok := st.output.report(); ok {
		put("output-tokens", r, true)
	}
	total, ok := st.tokens.report()
	if !ok {
		total, ok = sumReports(st.input, st.output)
	}
	if ok {
		put("tokens", total, true)
	}
	return h
}

// nearestThousand is n rounded to the nearest thousand (half up).
func nearestThousand(n int64) int64 { return (n + 500) / 1000 * 1000 }

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
// seconds rounded up ("The number of seconds to wait until you can retry
// the request. Earlier retries will fail.",
// https://platform.claude.com/docs/en/api/rate-limits), and for OpenAI
// retry-after-ms too. A request larger than the limit gets none: waiting
// cannot help it.
func (o *overLimit) retryHeaders(api string, h map[string]string) {
	if o.wait <= 0 {
		return
	}
	h["retry-after"] = strconv.FormatInt(int64(math.Ceil(o.wait.Seconds())), 10)
	if !isAnthropic(api) {
		h["retry-after-ms"] = strconv.FormatInt(int64(math.Ceil(float64(o.wait)/float64(time.Millisecond))), 10)
	}
}

// anthropicWords names each kind of limit in Anthropic's 429 message.
var anthropicWords = map[string]string{
	LimitRequests: "requests", LimitTokens: "tokens", LimitInputTokens: "input tokens", LimitOutputTokens: "output tokens",
}

// spec is the 429 of a refusal, in the words each provider uses; the
// limit it names is the per-minute one.
func (o *overLimit) spec(req *apiRequest) errSpec {
	limit := int64(o.b.limit)
	if isAnthropic(req.api) {
		return errSpec{status: 429, typ: "rate_limit_error", msg: fmt.Sprintf(
			"This request would exceed the rate limit for your organization (%s) of %s %s per minute. "+
				"For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. "+
				"Please reduce the prompt length or the maximum tokens requested, or try again later. "+
				"You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase.",
			org, thousands(limit), anthropicWords[o.kind])}
	}
	per := "requests per min (RPM)"
	if o.kind == LimitTokens {
		per = "tokens per min (TPM)"
	}
	const visit = " Visit https://platform.openai.com/account/rate-limits to learn more."
	requested := int64(o.n)
	msg := fmt.Sprintf("Rate limit reached for %s in organization %s on %s: Limit %d, Used %d, Requested %d. Please try again in %s.",
		req.Model, org, per, limit, limit-o.b.remaining(), requested, openAIDuration(o.wait)) + visit
	if o.wait <= 0 {
		msg = fmt.Sprintf("Request too large for %s in organization %s on %s: Limit %d, Requested %d. "+
			"The input or output tokens must be reduced in order to run successfully.", req.Model, org, per, limit, requested) + visit
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
