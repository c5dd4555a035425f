package ratelimit

import (
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// lim is a limit with both counts and a reset (zero: none).
func lim(limit, remaining int64, reset time.Time) Limit {
	return Limit{Limit: limit, Remaining: remaining, Reset: reset, HasLimit: true, HasRemaining: true}
}

func after(d time.Duration) time.Time { return now.Add(d) }

// parseCases are header sets in the real formats, with what Parse reads
// from them.
var parseCases = []struct {
	name    string
	headers map[string]string
	want    map[Kind]Limit
}{
	{name: "none", headers: nil, want: nil},
	{name: "unrelated headers", headers: map[string]string{
		"content-type": "text/event-stream", "retry-after": "7",
		"x-ratelimit-reset": "30", "x-ratelimit-reset-ms": "2500", // retry hints, not limits
		"x-ratelimit-limit-requests-day": "10000", "anthropic-ratelimit-unified-status": "allowed",
	}, want: nil},
	{name: "openai", headers: merge(
		openAIHeaders("requests", "60", "59", "1s"),
		openAIHeaders("tokens", "150000", "149984", "6m0s"),
	), want: map[Kind]Limit{
		Requests: lim(60, 59, after(time.Second)),
		Tokens:   lim(150000, 149984, after(6*time.Minute)),
	}},
	{name: "openai short and fractional resets", headers: merge(
		openAIHeaders("requests", "10000", "9999", "20ms"),
		openAIHeaders("tokens", "2000000", "1999000", "1.5s"),
	), want: map[Kind]Limit{
		Requests: lim(10000, 9999, after(20*time.Millisecond)),
		Tokens:   lim(2000000, 1999000, after(1500*time.Millisecond)),
	}},
	{name: "openai minutes with fraction, zero reset", headers: merge(
		openAIHeaders("requests", "500", "0", "6m0.5s"),
		openAIHeaders("tokens", "30000", "30000", "0s"),
	), want: map[Kind]Limit{
		Requests: lim(500, 0, after(6*time.Minute+500*time.Millisecond)),
		Tokens:   lim(30000, 30000, now),
	}},
	{name: "anthropic", headers: merge(
		anthropicHeaders("requests", "50", "49", "2025-06-01T12:00:01Z"),
		anthropicHeaders("tokens", "90000", "89000", "2025-06-01T12:00:06.5Z"),
		anthropicHeaders("input-tokens", "80000", "79500", "2025-06-01T12:00:00.123456789Z"),
		anthropicHeaders("output-tokens", "16000", "15500", "2025-06-01T14:00:30+02:00"),
	), want: map[Kind]Limit{
		Requests:     lim(50, 49, after(time.Second)),
		Tokens:       lim(90000, 89000, after(6500*time.Millisecond)),
		InputTokens:  lim(80000, 79500, after(123456789*time.Nanosecond)),
		OutputTokens: lim(16000, 15500, after(30*time.Second)),
	}},
	{name: "minus one from a compatible server", headers: map[string]string{
		"x-ratelimit-limit-requests": "-1", "x-ratelimit-remaining-requests": "-1", "x-ratelimit-reset-requests": "-1s",
		"x-ratelimit-limit-tokens": "-1", "x-ratelimit-remaining-tokens": "-1", "x-ratelimit-reset-tokens": "1s",
		"anthropic-ratelimit-input-tokens-limit": "-1", "anthropic-ratelimit-input-tokens-remaining": "-1",
	}, want: nil},
	{name: "minus one limit, usable remaining", headers: map[string]string{
		"x-ratelimit-limit-requests": "-1", "x-ratelimit-remaining-requests": "12", "x-ratelimit-reset-requests": "2s",
	}, want: map[Kind]Limit{
		Requests: {Remaining: 12, HasRemaining: true, Reset: after(2 * time.Second)},
	}},
	{name: "limit without remaining or reset", headers: map[string]string{
		"anthropic-ratelimit-tokens-limit": "1000",
	}, want: map[Kind]Limit{Tokens: {Limit: 1000, HasLimit: true}}},
	{name: "reset alone is no limit", headers: map[string]string{
		"x-ratelimit-reset-requests": "1s", "anthropic-ratelimit-output-tokens-reset": "2025-06-01T12:00:01Z",
	}, want: nil},
	{name: "garbage counts", headers: map[string]string{
		"x-ratelimit-limit-requests": "lots", "x-ratelimit-remaining-requests": "12.5",
		"x-ratelimit-limit-tokens": "1e3", "x-ratelimit-remaining-tokens": "",
		"anthropic-ratelimit-input-tokens-limit": "99999999999999999999", "anthropic-ratelimit-input-tokens-remaining": "0x10",
		"anthropic-ratelimit-output-tokens-limit": "60s", "anthropic-ratelimit-output-tokens-remaining": "+-3",
	}, want: nil},
	{name: "zero limit ignored, zero remaining kept", headers: map[string]string{
		"x-ratelimit-limit-tokens": "0", "x-ratelimit-remaining-tokens": "0",
	}, want: map[Kind]Limit{Tokens: {HasRemaining: true}}},
	{name: "spaces trimmed", headers: map[string]string{
		"x-ratelimit-limit-requests": " 60 ", "x-ratelimit-remaining-requests": "\t5", "x-ratelimit-reset-requests": " 3s ",
	}, want: map[Kind]Limit{Requests: lim(60, 5, after(3*time.Second))}},
	{name: "garbage resets", headers: merge(
		openAIHeaders("requests", "60", "59", "soon"),
		openAIHeaders("tokens", "100", "99", "60"), // no unit
		anthropicHeaders("input-tokens", "10", "9", "2025-06-01 12:00:01"),
		anthropicHeaders("output-tokens", "20", "19", "1748779201"), // epoch seconds
	), want: map[Kind]Limit{
		Requests: lim(60, 59, time.Time{}), Tokens: lim(100, 99, time.Time{}),
		InputTokens: lim(10, 9, time.Time{}), OutputTokens: lim(20, 19, time.Time{}),
	}},
	{name: "reset in the past", headers: merge(
		anthropicHeaders("requests", "50", "50", "2025-06-01T11:59:59.999Z"),
		anthropicHeaders("tokens", "50", "50", "2025-06-01T12:00:00Z"), // now: kept
	), want: map[Kind]Limit{Requests: lim(50, 50, time.Time{}), Tokens: lim(50, 50, now)}},
	{name: "reset in the past", headers: map[string]string{
		"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "50",
		"anthropic-ratelimit-requests-reset": "2025-06-01T11:59:59.999Z",
		"anthropic-ratelimit-tokens-limit":   "50", "anthropic-ratelimit-tokens-remaining": "50",
		"anthropic-ratelimit-tokens-reset": "2025-06-01T12:00:00Z", // now: kept
	}, want: map[Kind]Limit{Requests: lim(50, 50, time.Time{}), Tokens: lim(50, 50, now)}},
	{name: "names in any case", headers: map[string]string{
		"X-RateLimit-Limit-Requests": "60", "X-Ratelimit-Remaining-Requests": "10", "X-RATELIMIT-RESET-REQUESTS": "1s",
		"Anthropic-Ratelimit-Tokens-Limit": "7", "anthropic-ratelimit-tokens-remaining": "6",
	}, want: map[Kind]Limit{Requests: lim(60, 10, after(time.Second)), Tokens: lim(7, 6, time.Time{})}},
	{name: "lower-case name wins", headers: map[string]string{
		"X-RateLimit-Limit-Requests": "20", "x-ratelimit-limit-requests": "10", "X-Ratelimit-Limit-Requests": "30",
		"x-ratelimit-remaining-requests": "5",
	}, want: map[Kind]Limit{Requests: lim(10, 5, time.Time{})}},
	{name: "both families, anthropic wins field by field", headers: map[string]string{
		"x-ratelimit-limit-tokens": "100", "x-ratelimit-remaining-tokens": "90", "x-ratelimit-reset-tokens": "10s",
		"anthropic-ratelimit-tokens-limit": "200", "anthropic-ratelimit-tokens-remaining": "-1",
		"anthropic-ratelimit-tokens-reset": "garbage",
		"x-ratelimit-limit-requests":       "5", "anthropic-ratelimit-requests-remaining": "4",
	}, want: map[Kind]Limit{Tokens: lim(200, 90, after(10*time.Second)), Requests: lim(5, 4, time.Time{})}},
}

func TestParse(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			wantSnapshot(t, "Parse", Parse(tc.headers, now), tc.want)
			if h, ok := httpHeader(tc.headers); ok {
				wantSnapshot(t, "ParseHTTP", ParseHTTP(h, now), tc.want)
			}
		})
	}
}

// openAIHeaders is the three OpenAI headers of kind ("requests", "tokens").
func openAIHeaders(kind, limit, remaining, reset string) map[string]string {
	return map[string]string{
		"x-ratelimit-limit-" + kind:     limit,
		"x-ratelimit-remaining-" + kind: remaining,
		"x-ratelimit-reset-" + kind:     reset,
	}
}

// anthropicHeaders is the three Anthropic headers of kind ("requests",
// "input-tokens", ...).
func anthropicHeaders(kind, limit, remaining, reset string) map[string]string {
	return map[string]string{
		"anthropic-ratelimit-" + kind + "-limit":     limit,
		"anthropic-ratelimit-" + kind + "-remaining": remaining,
		"anthropic-ratelimit-" + kind + "-reset":     reset,
	}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// httpHeader is headers as an http.Header; false when two names differ only
// in case.
func httpHeader(headers map[string]string) (http.Header, bool) {
	h := http.Header{}
	for k, v := range headers {
		if h.Get(k) != "" {
			return nil, false
		}
		h.Set(k, v)
	}
	return h, true
}

func wantSnapshot(t *testing.T, fn string, got Snapshot, want map[Kind]Limit) {
	t.Helper()
	if got.Len() != len(want) {
		t.Errorf("%s: %d kinds, want %d: %v", fn, got.Len(), len(want), describe(got))
	}
	for _, k := range Kinds() {
		g, ok := got.Get(k)
		w, wantOK := want[k]
		if ok != wantOK {
			t.Errorf("%s: %v present %v, want %v (%+v)", fn, k, ok, wantOK, g)
			continue
		}
		if g.HasLimit != w.HasLimit || g.Limit != w.Limit || g.HasRemaining != w.HasRemaining || g.Remaining != w.Remaining || !g.Reset.Equal(w.Reset) {
			t.Errorf("%s: %v = %+v, want %+v", fn, k, g, w)
		}
	}
}

func describe(s Snapshot) string {
	var parts []string
	for _, k := range Kinds() {
		if l, ok := s.Get(k); ok {
			parts = append(parts, fmt.Sprintf("%v:%+v", k, l))
		}
	}
	return strings.Join(parts, " ")
}

func TestParseHTTPFirstValue(t *testing.T) {
	h := http.Header{}
	h.Add("X-Ratelimit-Remaining-Requests", "3")
	h.Add("X-Ratelimit-Remaining-Requests", "9")
	l, ok := ParseHTTP(h, now).Get(Requests)
	if !ok || !l.HasRemaining || l.Remaining != 3 || l.HasLimit {
		t.Errorf("got %+v %v, want remaining 3 only", l, ok)
	}
}

func TestKinds(t *testing.T) {
	var names []string
	for _, k := range Kinds() {
		names = append(names, k.String())
	}
	if got := strings.Join(names, ","); got != "requests,tokens,input_tokens,output_tokens" {
		t.Errorf("kinds %s", got)
	}
	if got := Kind(9).String(); got != "Kind(9)" {
		t.Errorf("out of range: %s", got)
	}
}

func TestSnapshotSetGet(t *testing.T) {
	var s Snapshot
	if s.Len() != 0 {
		t.Fatal("zero snapshot not empty")
	}
	s.Set(InputTokens, Limit{Limit: 5, Remaining: 7, HasLimit: true})
	l, ok := s.Get(InputTokens)
	if !ok || l.Limit != 5 || l.Remaining != 0 || s.Len() != 1 {
		t.Errorf("after Set: %+v %v, len %d", l, ok, s.Len())
	}
	s.Set(InputTokens, Limit{Limit: 5, Reset: now})
	if _, ok := s.Get(InputTokens); ok || s != (Snapshot{}) {
		t.Errorf("a limit without counts was kept: %v", describe(s))
	}
	s.Set(Kind(200), lim(1, 1, now))
	if _, ok := s.Get(Kind(200)); ok || s.Len() != 0 {
		t.Error("kind out of range stored")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("x-ratelimit-limit-requests", "60", "x-ratelimit-reset-requests", "6m0s")
	f.Add("anthropic-ratelimit-tokens-remaining", "-1", "anthropic-ratelimit-tokens-reset", "2025-06-01T12:00:01.5Z")
	f.Add("X-RateLimit-Remaining-Tokens", "0", "x-ratelimit-reset-tokens", "-3s")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		s := Parse(map[string]string{k1: v1, k2: v2}, now)
		for _, k := range Kinds() {
			l, ok := s.Get(k)
			if !ok {
				continue
			}
			if (l.HasLimit && l.Limit <= 0) || l.Remaining < 0 || (!l.Reset.IsZero() && l.Reset.Before(now)) {
				t.Fatalf("%v: untrustworthy %+v", k, l)
			}
		}
	})
}
