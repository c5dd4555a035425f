package retry

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// httpDate formats t as an IMF-fixdate, the preferred HTTP date form
// (net/http's TimeFormat).
func httpDate(t time.Time) string { return t.UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT") }

// Spec section 4, headers: names are case-insensitive; the first one present
// in the order retry-after-ms, retry-after, x-ratelimit-reset-ms,
// x-ratelimit-reset that gives a usable value wins; a missing, unparsable,
// non-positive or already-past value falls through to the next, and then to
// the error text.
func TestParseHintHeaders(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	epochS := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	epochMs := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).UnixMilli(), 10) }

	tests := []struct {
		name    string
		headers map[string]string
		text    string
		want    Hint
		wantOK  bool
	}{
		// retry-after-ms: milliseconds.
		{"retry-after-ms integer", map[string]string{"retry-after-ms": "1500"}, "", Hint{1500 * time.Millisecond, "retry-after-ms"}, true},
		{"retry-after-ms fractional rounds up", map[string]string{"retry-after-ms": "250.2"}, "", Hint{251 * time.Millisecond, "retry-after-ms"}, true},
		{"retry-after-ms below 1 ms rounds up to 1 ms", map[string]string{"retry-after-ms": "0.01"}, "", Hint{time.Millisecond, "retry-after-ms"}, true},
		{"retry-after-ms surrounding spaces", map[string]string{"retry-after-ms": " 300 "}, "", Hint{300 * time.Millisecond, "retry-after-ms"}, true},

		// retry-after: seconds (fractional, rounded up to whole ms) or an HTTP date.
		{"retry-after integer seconds", map[string]string{"retry-after": "30"}, "", Hint{30 * time.Second, "retry-after"}, true},
		{"retry-after fractional seconds", map[string]string{"retry-after": "1.5"}, "", Hint{1500 * time.Millisecond, "retry-after"}, true},
		{"retry-after tiny fraction rounds up to 1 ms", map[string]string{"retry-after": "0.0001"}, "", Hint{time.Millisecond, "retry-after"}, true},
		{"retry-after fraction rounds up to whole ms", map[string]string{"retry-after": "0.0015"}, "", Hint{2 * time.Millisecond, "retry-after"}, true},
		{"retry-after HTTP date in the future", map[string]string{"retry-after": httpDate(now.Add(90 * time.Second))}, "", Hint{90 * time.Second, "retry-after"}, true},
		{"retry-after literal IMF-fixdate", map[string]string{"retry-after": "Wed, 02 Dec 2026 10:00:30 GMT"}, "", Hint{30 * time.Second, "retry-after"}, true},
		{"retry-after RFC 850 date", map[string]string{"retry-after": "Wednesday, 02-Dec-26 10:02:00 GMT"}, "", Hint{2 * time.Minute, "retry-after"}, true},
		{"retry-after asctime date", map[string]string{"retry-after": "Wed Dec  2 10:00:05 2026"}, "", Hint{5 * time.Second, "retry-after"}, true},
		{"retry-after HTTP date in the past falls through", map[string]string{"retry-after": httpDate(now.Add(-time.Minute))}, "", Hint{}, false},
		{"retry-after HTTP date equal to now falls through", map[string]string{"retry-after": httpDate(now)}, "", Hint{}, false},
		{"retry-after past date falls through to x-ratelimit-reset-ms",
			map[string]string{"retry-after": httpDate(now.Add(-time.Minute)), "x-ratelimit-reset-ms": "2000"}, "",
			Hint{2 * time.Second, "x-ratelimit-reset-ms"}, true},
		{"retry-after past date falls through to text",
			map[string]string{"retry-after": httpDate(now.Add(-time.Hour))}, "try again in 20s",
			Hint{20 * time.Second, "text"}, true},

		// Absurd values: huge negatives never wrap to a positive delay; far futures saturate.
		{"huge negative retry-after-ms falls through", map[string]string{"retry-after-ms": "-10000000000000"}, "", Hint{}, false},
		{"huge negative retry-after falls through", map[string]string{"retry-after": "-10000000000"}, "", Hint{}, false},
		{"huge negative x-ratelimit-reset falls through", map[string]string{"x-ratelimit-reset": "-10000000000"}, "", Hint{}, false},
		{"far-future HTTP date saturates", map[string]string{"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, "", Hint{maxDuration, "retry-after"}, true},
		{"far-future epoch saturates", map[string]string{"x-ratelimit-reset": "99999999999999999999"}, "", Hint{maxDuration, "x-ratelimit-reset"}, true},
		{"hex float is not a number", map[string]string{"x-ratelimit-reset": "0x1p4"}, "", Hint{}, false},
		{"underscores are not a number", map[string]string{"retry-after": "1_0"}, "", Hint{}, false},

		// x-ratelimit-reset-ms: delta ms, or epoch (> 1e12 epoch ms, > 1e9 epoch s).
		{"x-ratelimit-reset-ms delta", map[string]string{"x-ratelimit-reset-ms": "2500"}, "", Hint{2500 * time.Millisecond, "x-ratelimit-reset-ms"}, true},
		{"x-ratelimit-reset-ms fractional delta rounds up", map[string]string{"x-ratelimit-reset-ms": "0.5"}, "", Hint{time.Millisecond, "x-ratelimit-reset-ms"}, true},
		{"x-ratelimit-reset-ms epoch ms", map[string]string{"x-ratelimit-reset-ms": epochMs(2500 * time.Millisecond)}, "", Hint{2500 * time.Millisecond, "x-ratelimit-reset-ms"}, true},
		{"x-ratelimit-reset-ms epoch seconds", map[string]string{"x-ratelimit-reset-ms": epochS(40 * time.Second)}, "", Hint{40 * time.Second, "x-ratelimit-reset-ms"}, true},
		{"x-ratelimit-reset-ms epoch ms in the past falls through", map[string]string{"x-ratelimit-reset-ms": epochMs(-time.Second)}, "", Hint{}, false},
		{"x-ratelimit-reset-ms epoch seconds in the past falls through", map[string]string{"x-ratelimit-reset-ms": epochS(-time.Minute)}, "", Hint{}, false},

		// x-ratelimit-reset: delta seconds, or epoch as above.
		{"x-ratelimit-reset delta seconds", map[string]string{"x-ratelimit-reset": "12"}, "", Hint{12 * time.Second, "x-ratelimit-reset"}, true},
		{"x-ratelimit-reset fractional delta seconds", map[string]string{"x-ratelimit-reset": "1.5"}, "", Hint{1500 * time.Millisecond, "x-ratelimit-reset"}, true},
		{"x-ratelimit-reset epoch seconds", map[string]string{"x-ratelimit-reset": epochS(90 * time.Second)}, "", Hint{90 * time.Second, "x-ratelimit-reset"}, true},
		{"x-ratelimit-reset fractional epoch seconds", map[string]string{"x-ratelimit-reset": epochS(0) + ".25"}, "", Hint{250 * time.Millisecond, "x-ratelimit-reset"}, true},
		{"x-ratelimit-reset epoch ms", map[string]string{"x-ratelimit-reset": epochMs(1500 * time.Millisecond)}, "", Hint{1500 * time.Millisecond, "x-ratelimit-reset"}, true},
		{"x-ratelimit-reset epoch seconds in the past falls through", map[string]string{"x-ratelimit-reset": epochS(-time.Second)}, "", Hint{}, false},
		{"x-ratelimit-reset epoch ms in the past falls through to text",
			map[string]string{"x-ratelimit-reset": epochMs(-time.Second)}, "Please retry in 900ms",
			Hint{900 * time.Millisecond, "text"}, true},

		// Header names are case-insensitive; Source is the canonical name.
		{"Retry-After", map[string]string{"Retry-After": "7"}, "", Hint{7 * time.Second, "retry-after"}, true},
		{"RETRY-AFTER-MS", map[string]string{"RETRY-AFTER-MS": "700"}, "", Hint{700 * time.Millisecond, "retry-after-ms"}, true},
		{"X-RateLimit-Reset-Ms", map[string]string{"X-RateLimit-Reset-Ms": "70"}, "", Hint{70 * time.Millisecond, "x-ratelimit-reset-ms"}, true},
		{"X-Ratelimit-Reset", map[string]string{"X-Ratelimit-Reset": "3"}, "", Hint{3 * time.Second, "x-ratelimit-reset"}, true},

		// Precedence: the first usable header in spec order wins.
		{"all four: retry-after-ms wins",
			map[string]string{"x-ratelimit-reset": "40", "x-ratelimit-reset-ms": "30000", "retry-after": "20", "retry-after-ms": "10000"}, "try again in 50s",
			Hint{10 * time.Second, "retry-after-ms"}, true},
		{"retry-after beats both reset headers",
			map[string]string{"x-ratelimit-reset": "1", "x-ratelimit-reset-ms": "1", "retry-after": "20"}, "",
			Hint{20 * time.Second, "retry-after"}, true},
		{"x-ratelimit-reset-ms beats x-ratelimit-reset",
			map[string]string{"x-ratelimit-reset": "40", "x-ratelimit-reset-ms": "30000"}, "",
			Hint{30 * time.Second, "x-ratelimit-reset-ms"}, true},
		{"precedence with mixed-case names",
			map[string]string{"X-RateLimit-Reset": "40", "Retry-After": "20", "Retry-After-Ms": "10"}, "",
			Hint{10 * time.Millisecond, "retry-after-ms"}, true},
		{"header beats text even when the text asks for longer",
			map[string]string{"retry-after": "3"}, "try again in 20s",
			Hint{3 * time.Second, "retry-after"}, true},

		// Fall-through: missing, unparsable, non-positive or past values.
		{"retry-after-ms zero falls through to retry-after",
			map[string]string{"retry-after-ms": "0", "retry-after": "5"}, "",
			Hint{5 * time.Second, "retry-after"}, true},
		{"retry-after-ms unparsable falls through to retry-after",
			map[string]string{"retry-after-ms": "soon", "retry-after": "5"}, "",
			Hint{5 * time.Second, "retry-after"}, true},
		{"retry-after-ms negative falls through to retry-after",
			map[string]string{"retry-after-ms": "-100", "retry-after": "5"}, "",
			Hint{5 * time.Second, "retry-after"}, true},
		{"retry-after-ms empty falls through to x-ratelimit-reset",
			map[string]string{"retry-after-ms": "", "x-ratelimit-reset": "4"}, "",
			Hint{4 * time.Second, "x-ratelimit-reset"}, true},
		{"every header unusable falls through to text",
			map[string]string{"retry-after-ms": "0", "retry-after": "abc", "x-ratelimit-reset-ms": "-1", "x-ratelimit-reset": epochS(-time.Hour)},
			`"retryDelay": "37s"`,
			Hint{37 * time.Second, "text"}, true},
		{"every header unusable and no text",
			map[string]string{"retry-after-ms": "0", "retry-after": "abc", "x-ratelimit-reset-ms": "-1", "x-ratelimit-reset": epochS(-time.Hour)}, "",
			Hint{}, false},
		{"unrelated headers are ignored",
			map[string]string{"content-type": "application/json", "x-ratelimit-remaining": "0", "x-ratelimit-limit": "60", "retry-after-seconds": "9"}, "",
			Hint{}, false},
		{"unrelated headers, hint from text",
			map[string]string{"x-request-id": "42"}, "retry-after-ms=1200",
			Hint{1200 * time.Millisecond, "text"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseHint(tt.headers, tt.text, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ParseHint(%q, %q) = %+v, %v; want %+v, %v", tt.headers, tt.text, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// Spec section 4, text: when no header gives a value, the error text is
// searched.
func TestParseHintText(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		text   string
		want   time.Duration
		wantOK bool
	}{
		// retry-after-ms=N / retry-after-ms: N
		{"retry-after-ms=1200", 1200 * time.Millisecond, true},
		{"retry-after-ms: 800", 800 * time.Millisecond, true},
		{"upstream said Retry-After-Ms: 250 (rate limited)", 250 * time.Millisecond, true},
		// retry-after: N (seconds)
		{"retry-after: 7", 7 * time.Second, true},
		{"Retry-After: 2.5", 2500 * time.Millisecond, true},
		{"retry-after=3", 3 * time.Second, true},
		// Please retry in N(ms|s)
		{"Please retry in 37.5s", 37500 * time.Millisecond, true},
		{"Please retry in 900ms", 900 * time.Millisecond, true},
		{"Quota exceeded. Please retry in 37.561734339s.", 37562 * time.Millisecond, true},
		// Gemini "retryDelay": "Ns"
		{`"retryDelay": "37s"`, 37 * time.Second, true},
		{`{"error":{"code":429,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"12s"}]}}`, 12 * time.Second, true},
		// try again in N (ms|s|sec|min|minutes|h|hours)
		{"try again in 20s", 20 * time.Second, true},
		// Azure OpenAI: "Please retry after N seconds."
		{"have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds.", 6 * time.Second, true},
		{"try again in 1.5 seconds", 1500 * time.Millisecond, true},
		{"try again in 10 sec", 10 * time.Second, true},
		{"try again in 500ms", 500 * time.Millisecond, true},
		{"try again in 2 min", 2 * time.Minute, true},
		{"try again in 3 minutes", 3 * time.Minute, true},
		{"try again in 1 h", time.Hour, true},
		{"try again in 2 hours", 2 * time.Hour, true},
		{"try again in 6m0s", 6 * time.Minute, true},
		{"Rate limit reached for gpt-4o on tokens per min. Please try again in 20ms.", 20 * time.Millisecond, true},
		{"TRY AGAIN IN 4S", 4 * time.Second, true},
		// quota will reset after 1h2m3s
		{"quota will reset after 1h2m3s", time.Hour + 2*time.Minute + 3*time.Second, true},
		{"Your quota will reset after 45s.", 45 * time.Second, true},

		// No hint.
		{"", 0, false},
		{"rate limit exceeded", 0, false},
		{"503 Service Unavailable", 0, false},
		{"please try again later", 0, false},
		{"try again in a few minutes", 0, false},
		{"please retry", 0, false},
		{"retry-after-ms=0", 0, false},
		{"retry-after: 0", 0, false},
		{"try again in 0s", 0, false},
		{"retry-after: soon", 0, false},
		{`"retryDelay": "soon"`, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			for _, headers := range []map[string]string{nil, {}} {
				got, ok := ParseHint(headers, tt.text, now)
				want := Hint{}
				if tt.wantOK {
					want = Hint{Delay: tt.want, Source: "text"}
				}
				if got != want || ok != tt.wantOK {
					t.Errorf("ParseHint(%v, %q) = %+v, %v; want %+v, %v", headers, tt.text, got, ok, want, tt.wantOK)
				}
			}
		})
	}
}

// Garbage and absurd header values never panic, never give a non-positive
// delay, and fall through to the next source; huge values saturate.
func TestParseHintGarbage(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	names := []string{"retry-after-ms", "retry-after", "x-ratelimit-reset-ms", "x-ratelimit-reset"}
	garbage := []string{
		"", "   ", "abc", "-5", "-0.5", "0", "-0", "0.0", "NaN", "nan", "Inf", "+Inf", "-Inf",
		"Infinity", "0x10", "1e400", "-1e400", "5s", "1,5", "12 34", "1..5", "--1", "1e",
		"\x00", "٣", "Wed, 32 Dec 2026 10:00:00 GMT",
	}
	for _, name := range names {
		for _, v := range garbage {
			t.Run(name+"="+strconv.Quote(v), func(t *testing.T) {
				h := map[string]string{name: v}
				if got, ok := ParseHint(h, "", now); ok {
					t.Errorf("ParseHint(%q) = %+v, true; want no hint", h, got)
				}
				want := Hint{20 * time.Second, "text"}
				if got, ok := ParseHint(h, "try again in 20s", now); got != want || !ok {
					t.Errorf("ParseHint(%q, text) = %+v, %v; want %+v from the text", h, got, ok, want)
				}
			})
		}
	}

	t.Run("huge retry-after saturates", func(t *testing.T) {
		for _, name := range []string{"retry-after", "retry-after-ms", "Retry-After"} {
			h := map[string]string{name: "99999999999999999999"}
			got, ok := ParseHint(h, "", now)
			if !ok || got.Delay != time.Duration(math.MaxInt64) || got.Source != strings.ToLower(name) {
				t.Errorf("ParseHint(%q) = %+v, %v; want the largest Duration from %s", h, got, ok, strings.ToLower(name))
			}
		}
	})
	t.Run("huge x-ratelimit-reset delta saturates", func(t *testing.T) {
		// 9e8 is a delta (not above 1e9): 9e8 s fits in a Duration.
		h := map[string]string{"x-ratelimit-reset": "900000000"}
		got, ok := ParseHint(h, "", now)
		if want := (Hint{900000000 * time.Second, "x-ratelimit-reset"}); got != want || !ok {
			t.Errorf("ParseHint(%q) = %+v, %v; want %+v", h, got, ok, want)
		}
	})
	t.Run("huge text hints saturate", func(t *testing.T) {
		for _, text := range []string{
			"try again in 99999999999999999999 hours",
			"try again in 99999999999999999999h99999999999999999999m",
			"retry-after: 99999999999999999999",
			"retry-after-ms=99999999999999999999",
			"Please retry in 99999999999999999999s",
			`"retryDelay": "99999999999999999999s"`,
			"quota will reset after 99999999999999999999h1s",
		} {
			got, ok := ParseHint(nil, text, now)
			if !ok || got.Delay != time.Duration(math.MaxInt64) || got.Source != "text" {
				t.Errorf("ParseHint(%q) = %+v, %v; want the largest Duration from text", text, got, ok)
			}
		}
	})
	t.Run("absurd text never panics nor goes non-positive", func(t *testing.T) {
		for _, text := range []string{
			"try again in 1" + strings.Repeat("0", 400) + "s",
			"retry-after: 1" + strings.Repeat("0", 400),
			"try again in " + strings.Repeat("1h", 10000),
			strings.Repeat("try again in ", 1000),
			strings.Repeat("9", 100000),
			"try again in 0.0000000001s",
		} {
			if got, ok := ParseHint(nil, text, now); ok && got.Delay <= 0 {
				t.Errorf("ParseHint(%.40q...) = %+v, true; want a positive delay", text, got)
			}
		}
	})
	t.Run("empty and nil maps", func(t *testing.T) {
		for _, h := range []map[string]string{nil, {}} {
			if got, ok := ParseHint(h, "", now); ok || got != (Hint{}) {
				t.Errorf("ParseHint(%v, \"\") = %+v, %v; want zero, false", h, got, ok)
			}
			if got, ok := ParseHint(h, "try again in 2 min", now); !ok || got != (Hint{2 * time.Minute, "text"}) {
				t.Errorf("ParseHint(%v, text) = %+v, %v; want 2m from text", h, got, ok)
			}
		}
	})
}

// Spec section 4: usage-limit wait when the provider gives no hint, by
// reason, first match wins: capacity 45 s + up to 30 s random; rate limit
// 30 s; quota 30 min; server error 20 s; unknown 30 min.
func TestLimitWait(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		status int
		r      float64
		reason LimitReason
		wait   time.Duration
	}{
		// Model capacity: capacity, overloaded, 529, 503, resource exhausted.
		{"capacity word", "model is at capacity", 0, 0, ReasonCapacity, 45 * time.Second},
		{"overloaded", "Overloaded", 0, 0, ReasonCapacity, 45 * time.Second},
		{"overloaded_error", `{"type":"overloaded_error"}`, 0, 0, ReasonCapacity, 45 * time.Second},
		{"status 529", "", 529, 0, ReasonCapacity, 45 * time.Second},
		{"status 503", "", 503, 0, ReasonCapacity, 45 * time.Second},
		{"529 in text", "upstream error 529", 0, 0, ReasonCapacity, 45 * time.Second},
		{"503 in text", "HTTP 503 from upstream", 0, 0, ReasonCapacity, 45 * time.Second},
		{"resource exhausted", "Resource exhausted", 0, 0, ReasonCapacity, 45 * time.Second},
		{"RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED: try later", 0, 0, ReasonCapacity, 45 * time.Second},
		{"capacity r=0.5", "capacity", 0, 0.5, ReasonCapacity, 60 * time.Second},
		{"capacity r=0.25", "capacity", 0, 0.25, ReasonCapacity, 52500 * time.Millisecond},
		{"capacity r=1", "capacity", 0, 1, ReasonCapacity, 75 * time.Second},
		{"capacity r NaN clamps to 0", "capacity", 0, math.NaN(), ReasonCapacity, 45 * time.Second},
		{"capacity r negative clamps to 0", "capacity", 0, -3, ReasonCapacity, 45 * time.Second},
		{"capacity r above 1 clamps to 1", "capacity", 0, 7, ReasonCapacity, 75 * time.Second},

		// Rate limit: per minute, rate limit, too many requests.
		{"per minute", "limit of 10 requests per minute reached", 0, 0.9, ReasonRateLimit, 30 * time.Second},
		{"rate limit", "Rate limit reached", 0, 0.9, ReasonRateLimit, 30 * time.Second},
		{"too many requests", "upstream said: Too Many Requests", 429, 0, ReasonRateLimit, 30 * time.Second},
		// The provider's own words and code decide, never our adapters'
		// status line, and not Anthropic's type: it types usage limits
		// rate_limit_error too.
		{"our status line is not the reason", "429 Too Many Requests", 429, 0, ReasonUnknown, 30 * time.Minute},
		{"status line then quota", "429 Too Many Requests: You exceeded your current quota", 429, 0, ReasonQuota, 30 * time.Minute},
		{"status line then usage limit", "429 Too Many Requests: rate_limit_error: Claude AI usage limit reached", 429, 0, ReasonQuota, 30 * time.Minute},
		{"rate_limit_error alone", `{"type":"rate_limit_error"}`, 0, 0, ReasonUnknown, 30 * time.Minute},

		// Quota: exhausted, quota, usage limit.
		{"exhausted", "credits exhausted", 0, 0, ReasonQuota, 30 * time.Minute},
		{"quota", "You exceeded your current quota", 429, 0, ReasonQuota, 30 * time.Minute},
		{"usage limit", "usage limit reached", 0, 0, ReasonQuota, 30 * time.Minute},
		{"usage_limit_reached", "usage_limit_reached", 0, 0, ReasonQuota, 30 * time.Minute},

		// Server error: 500, internal error.
		{"status 500", "", 500, 0, ReasonServerError, 20 * time.Second},
		{"500 in text", "HTTP 500", 0, 0, ReasonServerError, 20 * time.Second},
		{"internal error", "Internal error encountered", 0, 0, ReasonServerError, 20 * time.Second},

		// Unknown: 30 min.
		{"empty", "", 0, 0, ReasonUnknown, 30 * time.Minute},
		{"bare 429", "", 429, 0, ReasonUnknown, 30 * time.Minute},
		{"unrecognised text", "something odd happened", 0, 0.5, ReasonUnknown, 30 * time.Minute},
		{"500 inside a longer number", "prompt has 130500 tokens", 0, 0, ReasonUnknown, 30 * time.Minute},
		{"503 inside a longer number", "request id 15030", 0, 0, ReasonUnknown, 30 * time.Minute},

		// First match wins, in table order.
		{"capacity beats rate limit", "overloaded: rate limit", 0, 0, ReasonCapacity, 45 * time.Second},
		{"exhausted your capacity is capacity", "You have exhausted your capacity", 0, 0, ReasonCapacity, 45 * time.Second},
		{"503 status beats quota text", "quota", 503, 0, ReasonCapacity, 45 * time.Second},
		{"rate limit beats quota", "Quota exceeded for requests per minute", 0, 0, ReasonRateLimit, 30 * time.Second},
		{"quota beats server error", "internal error: quota", 500, 0, ReasonQuota, 30 * time.Minute},
		{"case-insensitive", "TOO MANY REQUESTS", 0, 0, ReasonRateLimit, 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, wait := LimitWait(tt.text, tt.status, tt.r)
			if reason != tt.reason || wait != tt.wait {
				t.Errorf("LimitWait(%q, %d, %v) = %v, %v; want %v, %v", tt.text, tt.status, tt.r, reason, wait, tt.reason, tt.wait)
			}
		})
	}

	t.Run("capacity r just under 1 is just under 75 s", func(t *testing.T) {
		_, wait := LimitWait("capacity", 0, math.Nextafter(1, 0))
		if wait > 75*time.Second || wait < 75*time.Second-time.Microsecond {
			t.Errorf("LimitWait(capacity, r→1) = %v; want just under or at 75s", wait)
		}
	})
	t.Run("capacity spans 45-75 s", func(t *testing.T) {
		for i := 0; i <= 1000; i++ {
			r := float64(i) / 1000
			_, wait := LimitWait("overloaded", 0, r)
			if wait < 45*time.Second || wait > 75*time.Second {
				t.Fatalf("LimitWait(overloaded, %v) = %v; want within [45s, 75s]", r, wait)
			}
		}
	})
	t.Run("long text", func(t *testing.T) {
		long := strings.Repeat("x", 5000) + " Rate Limit"
		if reason, wait := LimitWait(long, 0, 0); reason != ReasonRateLimit || wait != 30*time.Second {
			t.Errorf("LimitWait(long rate limit text) = %v, %v; want rate_limit, 30s", reason, wait)
		}
	})
	t.Run("reason names", func(t *testing.T) {
		for r, want := range map[LimitReason]string{
			ReasonUnknown: "unknown", ReasonCapacity: "capacity", ReasonRateLimit: "rate_limit",
			ReasonQuota: "quota", ReasonServerError: "server_error",
		} {
			if got := r.String(); got != want {
				t.Errorf("LimitReason(%d).String() = %q; want %q", r, got, want)
			}
		}
	})
}

// asciiUpper upper-cases ASCII letters only, so the case-insensitivity
// invariant below does not depend on Unicode folding.
func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return string(b)
}

func FuzzParseHint(f *testing.F) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, s := range []struct{ name, value, text string }{
		{"retry-after-ms", "1500", ""},
		{"retry-after-ms", "250.2", "try again in 20s"},
		{"Retry-After", "1.5", ""},
		{"retry-after", "0.0001", ""},
		{"retry-after", "Wed, 02 Dec 2026 10:00:30 GMT", ""},
		{"retry-after", "Wed, 02 Dec 2026 09:00:30 GMT", "Please retry in 900ms"},
		{"retry-after", "99999999999999999999", ""},
		{"retry-after", "1e400", ""},
		{"retry-after", "NaN", ""},
		{"retry-after", "-5", "quota will reset after 1h2m3s"},
		{"x-ratelimit-reset-ms", "1796205602500", ""},
		{"x-ratelimit-reset-ms", "1796205640", ""},
		{"x-ratelimit-reset", "12", ""},
		{"X-RateLimit-Reset", "1796205690", ""},
		{"x-ratelimit-reset", "0x10", `"retryDelay": "37s"`},
		{"content-type", "text/plain", "try again in 6m0s"},
		{"", "", "retry-after-ms: 800"},
		{"", "", "Please retry in 37.5s"},
		{"", "", "try again in 1.5 seconds"},
		{"", "", "try again in 99999999999999999999 hours"},
	} {
		f.Add(s.name, s.value, s.text)
	}
	sources := map[string]bool{"retry-after-ms": true, "retry-after": true, "x-ratelimit-reset-ms": true, "x-ratelimit-reset": true, "text": true}
	f.Fuzz(func(t *testing.T, name, value, text string) {
		headers := map[string]string{name: value}
		got, ok := ParseHint(headers, text, now)
		if ok {
			if got.Delay <= 0 {
				t.Fatalf("ParseHint(%q, %q) = %+v, true; want a positive delay", headers, text, got)
			}
			if !sources[got.Source] {
				t.Fatalf("ParseHint(%q, %q) = %+v; unknown source", headers, text, got)
			}
		} else if got != (Hint{}) {
			t.Fatalf("ParseHint(%q, %q) = %+v, false; want the zero Hint", headers, text, got)
		}
		// Deterministic.
		if again, ok2 := ParseHint(headers, text, now); again != got || ok2 != ok {
			t.Fatalf("ParseHint(%q, %q) not deterministic: %+v, %v then %+v, %v", headers, text, got, ok, again, ok2)
		}
		// Header names are case-insensitive.
		upper := map[string]string{asciiUpper(name): value}
		if u, uok := ParseHint(upper, text, now); u != got || uok != ok {
			t.Fatalf("ParseHint(%q, %q) = %+v, %v; with %q: %+v, %v", headers, text, got, ok, upper, u, uok)
		}
		// A header never removes a text hint: without the header the text alone
		// gives a hint whenever the header did not win.
		if !ok {
			if h, tok := ParseHint(nil, text, now); tok {
				t.Fatalf("ParseHint(%q, %q) = no hint, but the text alone gives %+v", headers, text, h)
			}
		}
	})
}

func BenchmarkParseHint(b *testing.B) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	b.Run("retry-after header", func(b *testing.B) {
		headers := map[string]string{"Content-Type": "application/json", "Retry-After": "1.5"}
		text := "429 Too Many Requests"
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := ParseHint(headers, text, now); !ok {
				b.Fatal("no hint")
			}
		}
	})
	b.Run("text hint", func(b *testing.B) {
		text := "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 6m0s. Visit https://platform.openai.com/account/rate-limits to learn more."
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := ParseHint(nil, text, now); !ok {
				b.Fatal("no hint")
			}
		}
	})
}
