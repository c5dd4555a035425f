package retry

import (
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Hint is a provider-requested delay and where it came from.
type Hint struct {
	Delay  time.Duration // always positive when found
	Source string        // header name ("retry-after", ...) or "text"
}

// hintHeaders are read in this order; the first usable value wins.
var hintHeaders = [...]struct {
	name  string
	parse func(v string, now time.Time) (time.Duration, bool)
}{
	{"retry-after-ms", parseRetryAfterMs},
	{"retry-after", parseRetryAfter},
	{"x-ratelimit-reset-ms", func(v string, now time.Time) (time.Duration, bool) { return parseReset(v, now, time.Millisecond) }},
	{"x-ratelimit-reset", func(v string, now time.Time) (time.Duration, bool) { return parseReset(v, now, time.Second) }},
}

// ParseHint finds the provider's requested delay: from the headers first
// (names case-insensitive, in the order retry-after-ms, retry-after,
// x-ratelimit-reset-ms, x-ratelimit-reset; a missing, unparsable,
// non-positive or past value falls through), then from the error text.
// now is used for HTTP dates and absolute epochs.
func ParseHint(headers map[string]string, text string, now time.Time) (Hint, bool) {
	return parseHint(headers, text, now, nil)
}

// parseHint is ParseHint reading text, if no header gives a hint, into r
// (which may hold that reading already; nil: a reading of its own).
func parseHint(headers map[string]string, text string, now time.Time, r *reading) (Hint, bool) {
	for _, h := range hintHeaders {
		v, ok := headerValue(headers, h.name)
		if !ok {
			continue
		}
		if d, ok := h.parse(strings.TrimSpace(v), now); ok && d > 0 {
			return Hint{Delay: d, Source: h.name}, true
		}
	}
	if r == nil {
		r = new(reading)
	}
	if d, ok := parseTextHint(r.of(text)); ok && d > 0 {
		return Hint{Delay: d, Source: "text"}, true
	}
	return Hint{}, false
}

func headerValue(headers map[string]string, name string) (string, bool) {
	if v, ok := headers[name]; ok {
		return v, true
	}
	for k, v := range headers {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// parseRetryAfterMs reads a number of milliseconds.
func parseRetryAfterMs(v string, _ time.Time) (time.Duration, bool) {
	return scaled(v, time.Millisecond)
}

// parseRetryAfter reads seconds (possibly fractional) or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if d, ok := scaled(v, time.Second); ok {
		return d, true
	}
	// The three HTTP date forms: IMF-fixdate, RFC 850 and asctime.
	if t, err := http.ParseTime(v); err == nil {
		return ceilMs(t.Sub(now)), true
	}
	return 0, false
}

// parseReset reads a delta in unit, or an absolute epoch: values above 1e12
// are epoch milliseconds, above 1e9 epoch seconds.
func parseReset(v string, now time.Time, unit time.Duration) (time.Duration, bool) {
	f, ok := parseNumber(v)
	if !ok {
		return 0, false
	}
	switch {
	case f > 1e12:
		return ceilMs(time.UnixMilli(int64(math.Min(f, 1e15))).Sub(now)), true
	case f > 1e9:
		return ceilMs(time.UnixMilli(int64(f * 1000)).Sub(now)), true
	}
	return scaledFloat(f, unit)
}

// scaled parses a non-negative decimal number of unit, rounded up to whole
// milliseconds and saturating at the largest Duration.
func scaled(v string, unit time.Duration) (time.Duration, bool) {
	f, ok := parseNumber(v)
	if !ok {
		return 0, false
	}
	return scaledFloat(f, unit)
}

// parseNumber reads a plain decimal number ("12", "-3", "1.5", "2e3"); hex
// floats, underscores, Inf and NaN are not numbers in a header.
func parseNumber(v string) (float64, bool) {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case isDigit(c), c == '.', c == '-', c == '+', c == 'e', c == 'E':
		default:
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// scaledFloat converts f units to a Duration rounded up to whole
// milliseconds, saturating at ±maxDuration.
func scaledFloat(f float64, unit time.Duration) (time.Duration, bool) {
	if math.IsNaN(f) {
		return 0, false
	}
	const limit = float64(maxDuration / time.Millisecond)
	ms := math.Ceil(f * float64(unit) / float64(time.Millisecond))
	switch {
	case ms >= limit:
		return maxDuration, true
	case ms <= -limit:
		return -maxDuration, true
	}
	return time.Duration(ms) * time.Millisecond, true
}

// ceilMs rounds d up to whole milliseconds, saturating at maxDuration.
func ceilMs(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r > 0 {
		if d > maxDuration-time.Millisecond {
			return maxDuration
		}
		d += time.Millisecond - r
	}
	return d
}

// Text hints, tried in order on the error message when no header gave one.
var (
	textRetryAfterMs = regexp.MustCompile(`(?i)retry-after-ms\s*[=:]\s*"?(\d+(?:\.\d+)?)`)
	textRetryAfter   = regexp.MustCompile(`(?i)retry-after\s*[=:]\s*"?(\d+(?:\.\d+)?)`)
	textPleaseRetry  = regexp.MustCompile(`(?i)please retry in\s*(\d+(?:\.\d+)?)\s*(ms|s)\b`)
	textRetryDelay   = regexp.MustCompile(`(?i)"retryDelay"\s*:\s*"(\d+(?:\.\d+)?)s"`)
	textTryAgain     = regexp.MustCompile(`(?i)(?:try again in|retry after)\s*((?:\d+(?:\.\d+)?\s*(?:ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)\s*)+)`)
	textQuotaReset   = regexp.MustCompile(`(?i)reset after\s*((?:\d+(?:\.\d+)?\s*(?:ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)\s*)+)`)
	durationPart     = regexp.MustCompile(`(\d+(?:\.\d+)?)\s*([a-z]+)`)
)

func parseTextHint(r *reading) (time.Duration, bool) {
	if !anyIn(textHintWords, &r.set, r.text) {
		return 0, false
	}
	text := r.text
	if m := textRetryAfterMs.FindStringSubmatch(text); m != nil {
		return scaled(m[1], time.Millisecond)
	}
	if m := textRetryAfter.FindStringSubmatch(text); m != nil {
		return scaled(m[1], time.Second)
	}
	if m := textPleaseRetry.FindStringSubmatch(text); m != nil {
		return scaled(m[1], unitOf(strings.ToLower(m[2])))
	}
	if m := textRetryDelay.FindStringSubmatch(text); m != nil {
		return scaled(m[1], time.Second)
	}
	for _, re := range [...]*regexp.Regexp{textTryAgain, textQuotaReset} {
		if m := re.FindStringSubmatch(text); m != nil {
			return compoundDuration(strings.ToLower(m[1]))
		}
	}
	return 0, false
}

// textHintWords prefilter the text hints: a text holding none of them has no
// hint, and the regular expressions are not run.
var textHintWords = needles("retry-after", "retry in", "retrydelay", "try again in", "retry after", "reset after")

// compoundDuration sums parts such as "1h2m3s" or "20 seconds".
func compoundDuration(s string) (time.Duration, bool) {
	var total time.Duration
	for _, part := range durationPart.FindAllStringSubmatch(s, -1) {
		d, ok := scaled(part[1], unitOf(part[2]))
		if !ok {
			return 0, false
		}
		if total > maxDuration-d {
			return maxDuration, true
		}
		total += d
	}
	return total, total > 0
}

func unitOf(word string) time.Duration {
	switch {
	case word == "ms" || strings.HasPrefix(word, "milli"):
		return time.Millisecond
	case word == "m" || strings.HasPrefix(word, "min"):
		return time.Minute
	case word == "h" || strings.HasPrefix(word, "h"):
		return time.Hour
	}
	return time.Second
}

// LimitReason is why a usage limit was hit, as guessed from the error.
type LimitReason uint8

// The usage-limit reasons, in the order they are recognised.
const (
	ReasonUnknown LimitReason = iota
	ReasonCapacity
	ReasonRateLimit
	ReasonQuota
	ReasonServerError
)

func (r LimitReason) String() string {
	return [...]string{"unknown", "capacity", "rate_limit", "quota", "server_error"}[r]
}

// limitReasons is the reason table: the first row whose words (or status)
// match wins.
var limitReasons = []struct {
	reason LimitReason
	words  []needle
	status []int
}{
	{ReasonCapacity, needles("capacity", "overloaded", "resource exhausted", "resource_exhausted"), []int{529, 503}},
	// Not "rate_limit": Anthropic types usage limits rate_limit_error.
	{ReasonRateLimit, needles("per minute", "rate limit", "too many requests"), nil},
	{ReasonQuota, needles("exhausted", "quota", "usage limit", "usage_limit"), nil},
	{ReasonServerError, needles("internal error", "internal_error"), []int{500}},
}

// LimitWait is the hint-less wait for a usage limit, by reason: capacity
// 45 s plus up to 30 s (r in [0, 1) picks the extra), rate limit 30 s,
// quota 30 min, server error 20 s, unknown 30 min. The same wait is the
// credential's blocked-until time and the failing model's cooldown.
//
// text is the whole error text: the reason is read from its provider part
// (see ProviderText), and status is matched as a number.
func LimitWait(text string, status int, r float64) (LimitReason, time.Duration) {
	var rd reading
	return limitWait(rd.of(text), status, r)
}

// limitWait is LimitWait of the text read in rd.
func limitWait(rd *reading, status int, r float64) (LimitReason, time.Duration) {
	text := rd.provider(status)
	reason := ReasonUnknown
	for _, row := range limitReasons {
		if anyIn(row.words, &rd.set, text) || (len(row.status) > 0 && statusMatches(row.status, text, status)) {
			reason = row.reason
			break
		}
	}
	switch reason {
	case ReasonCapacity:
		return reason, 45*time.Second + time.Duration(float64(30*time.Second)*(JitterFactor(r)-0.75)*4)
	case ReasonRateLimit:
		return reason, 30 * time.Second
	case ReasonServerError:
		return reason, 20 * time.Second
	}
	return reason, 30 * time.Minute
}
