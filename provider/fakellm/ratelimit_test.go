package fakellm

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// The rate-limit header names each API sends, by limit kind.
var (
	openAIRateHeaders = map[string][]string{
		LimitRequests: {"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"},
		LimitTokens:   {"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"},
	}
	anthropicRateHeaders = map[string][]string{
		LimitRequests: {"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset"},
		LimitTokens: {"anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset",
			"anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset",
			"anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset"},
	}
	allRateHeaders = cat(openAIRateHeaders[LimitRequests], openAIRateHeaders[LimitTokens],
		anthropicRateHeaders[LimitRequests], anthropicRateHeaders[LimitTokens], []string{"retry-after", "retry-after-ms"})
)

// goDuration is OpenAI's reset format: Go's duration format, in whole ms.
var goDuration = regexp.MustCompile(`^(0s|([0-9]+h)?([0-9]+m)?([0-9]+(\.[0-9]{1,3})?s|[0-9]+ms))$`)

// startLimited serves doc on a server whose clock is a testClock.
func startLimited(t *testing.T, doc string) (*testServer, *testClock) {
	t.Helper()
	ts := startJSON(t, doc)
	clk := newTestClock()
	ts.srv.SetClock(clk.Now)
	return ts, clk
}

// withMax is r asking for at most n output tokens, in its API's field.
func withMax(r req, n int) req {
	field := map[string]string{APIOpenAIChat: "max_completion_tokens", APIOpenAIResponses: "max_output_tokens", APIAnthropic: "max_tokens"}[r.api]
	extra := maps.Clone(r.extra)
	if extra == nil {
		extra = map[string]any{}
	}
	extra[field] = n
	r.extra = extra
	return r
}

// inputTokens is the input estimate of r: its body's bytes / 4.
func inputTokens(r req) int64 {
	if r.model == "" {
		r.model = "m"
	}
	return int64(max(1, len(r.body())/4))
}

// rateHeaders are the rate-limit and retry headers of h, by lower-case
// name.
func rateHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for _, name := range allRateHeaders {
		if v := h.Values(name); len(v) > 0 {
			out[name] = strings.Join(v, ",")
		}
	}
	return out
}

// wantRate is the rate-limit headers api sends for a requests and a
// tokens (TPM) bucket (limit, remaining, time until full); a zero limit
// means none.
func wantRate(api string, now time.Time, reqs, toks [3]int64) map[string]string {
	return wantBuckets(api, now, map[string][3]int64{"requests": reqs, "tokens": toks})
}

// wantBuckets is the rate-limit headers api sends for the buckets named
// as the headers name them ("requests", "tokens", "input-tokens",
// "output-tokens"): limit, remaining (exact; Anthropic's tokens are
// rounded here to the nearest thousand), time until full. A zero limit
// means none.
func wantBuckets(api string, now time.Time, buckets map[string][3]int64) map[string]string {
	out := map[string]string{}
	for kind, b := range buckets {
		if b[0] == 0 {
			continue
		}
		remaining := b[1]
		if api != APIAnthropic {
			prefix := "x-ratelimit-"
			out[prefix+"limit-"+kind], out[prefix+"remaining-"+kind] = strconv.FormatInt(b[0], 10), strconv.FormatInt(remaining, 10)
			out[prefix+"reset-"+kind] = openAIDuration(time.Duration(b[2]))
			continue
		}
		if kind != "requests" {
			remaining = (remaining + 500) / 1000 * 1000
		}
		prefix := "anthropic-ratelimit-" + kind
		out[prefix+"-limit"], out[prefix+"-remaining"] = strconv.FormatInt(b[0], 10), strconv.FormatInt(remaining, 10)
		out[prefix+"-reset"] = anthropicReset(now, time.Duration(b[2]))
	}
	return out
}

// checkHeaders compares the rate-limit headers of res with want.
func checkHeaders(t *testing.T, what string, res result, want map[string]string) {
	t.Helper()
	got := rateHeaders(res.header)
	delete(got, "retry-after") // checkRefusal checks the retry hints
	delete(got, "retry-after-ms")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: rate-limit headers\n got: %v\nwant: %v", what, got, want)
	}
}

// checkFormats checks the form of every rate-limit header of res.
func checkFormats(t *testing.T, api string, res result) {
	t.Helper()
	for name, v := range rateHeaders(res.header) {
		var ok bool
		switch {
		case strings.HasSuffix(name, "-reset") && api == APIAnthropic:
			ts, err := time.Parse(time.RFC3339, v)
			ok = err == nil && ts.Location() == time.UTC && strings.HasSuffix(v, "Z")
		case strings.HasPrefix(name, "x-ratelimit-reset-"):
			_, err := time.ParseDuration(v)
			ok = err == nil && goDuration.MatchString(v)
		default:
			n, err := strconv.ParseInt(v, 10, 64)
			ok = err == nil && n >= 0
		}
		if !ok {
			t.Errorf("%s: %s: %q is not well formed", api, name, v)
		}
	}
}

// TestRateLimitHeaders: every answer to a limited key and model carries
// its API's header set, with the buckets' state after the request; other
// keys get none.
func TestRateLimitHeaders(t *testing.T) {
	ts, clk := startLimited(t, `{"limits": [{"key": "key-a", "rpm": 600, "tpm": 200000}]}`)
	for _, api := range apis {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", api, stream), func(t *testing.T) {
				ts.srv.ResetClock() // full buckets
				r := withMax(req{api: api, key: "key-a", stream: stream}, 100)
				res := ts.call(r)
				if res.status != 200 {
					t.Fatalf("status %d %s", res.status, res.body)
				}
				cost := inputTokens(r) + 100
				// 1 request refills in 100 ms; cost tokens in cost * 0.3 ms.
				want := wantRate(api, clk.Now(), [3]int64{600, 599, int64(100 * time.Millisecond)},
					[3]int64{200000, 200000 - cost, int64(time.Duration(cost) * 300 * time.Microsecond)})
				checkHeaders(t, "first", res, want)
				checkFormats(t, api, res)
				if res := ts.call(req{api: api, key: "key-b", stream: stream}); len(rateHeaders(res.header)) != 0 {
					t.Errorf("unlimited key: %v", rateHeaders(res.header))
				}
			})
		}
	}
}

// TestRateLimitHeaderFormats checks the two reset formats on their own.
func TestRateLimitHeaderFormats(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {20 * time.Millisecond, "20ms"}, {1500 * time.Millisecond, "1.5s"}, {6 * time.Minute, "6m0s"},
		{100 * time.Microsecond, "1ms"}, {1234567 * time.Microsecond, "1.235s"}, {59999 * time.Millisecond, "59.999s"},
		{90 * time.Second, "1m30s"},
	} {
		if got := openAIDuration(tc.d); got != tc.want || !goDuration.MatchString(got) {
			t.Errorf("openAIDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
	now := time.Date(2025, 6, 1, 14, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "2025-06-01T12:00:00Z"}, {time.Millisecond, "2025-06-01T12:00:01Z"}, {time.Second, "2025-06-01T12:00:01Z"},
		{60 * time.Second, "2025-06-01T12:01:00Z"}, {61500 * time.Millisecond, "2025-06-01T12:01:02Z"},
	} {
		if got := anthropicReset(now, tc.d); got != tc.want {
			t.Errorf("anthropicReset(+%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestBucket: a bucket refills continuously at limit/60 per second, up to
// its limit, and says how long it needs.
func TestBucket(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	b := newBucket(600, 0, t0)
	b.level, b.minute = 0, 0
	for _, tc := range []struct {
		after     time.Duration
		remaining int64
		full      time.Duration
		until5    time.Duration
	}{
		{0, 0, time.Minute, 500 * time.Millisecond},
		{150 * time.Millisecond, 1, 59850 * time.Millisecond, 350 * time.Millisecond},
		{time.Second, 10, 59 * time.Second, 0},
		{30 * time.Second, 300, 30 * time.Second, 0},
		{2 * time.Minute, 600, 0, 0},
	} {
		b.refill(t0.Add(tc.after))
		if b.remaining() != tc.remaining || b.untilFull() != tc.full || b.until(5) != tc.until5 {
			t.Errorf("after %v: remaining %d, full in %v, 5 in %v; want %d, %v, %v",
				tc.after, b.remaining(), b.untilFull(), b.until(5), tc.remaining, tc.full, tc.until5)
		}
	}
	if newBucket(0, 0, t0) != nil {
		t.Error("a zero limit made a bucket")
	}
}

// refusal is a 429 of a bucket as the test expects it.
type refusal struct {
	kind       string // LimitRequests or LimitTokens
	limit      int64
	used       int64
	requested  int64
	wait       time.Duration // 0: larger than the limit, no retry hints
	retryAfter string
}

// retryAfter is the retry-after of a wait: whole seconds, rounded up.
func retryAfter(wait time.Duration) string {
	return strconv.Itoa(int((wait + time.Second - 1) / time.Second))
}

// peek is the rate-limit headers the server would send r now, taking
// nothing from the buckets (as an error answer's are).
func (ts *testServer) peek(r req) result {
	ts.t.Helper()
	if r.model == "" {
		r.model = "m"
	}
	if r.key == "" {
		r.key = "test-key"
	}
	h := http.Header{}
	for k, v := range ts.srv.peekRate(&apiRequest{api: r.api, key: r.key, Model: r.model}) {
		h.Set(k, v)
	}
	return result{header: h}
}

// checkRefusal checks a bucket's 429: status, body and retry hints.
func checkRefusal(t *testing.T, api, model string, res result, want refusal) {
	t.Helper()
	var msg string
	if api == APIAnthropic {
		per := map[string]string{LimitRequests: "requests", LimitTokens: "tokens"}[want.kind]
		msg = checkError(t, api, res, wantErr{429, "rate_limit_error", "",
			fmt.Sprintf("This request would exceed the rate limit for your organization (org-fakellm) of %s %s per minute. ", thousands(want.limit), per)})
	} else {
		per := map[string]string{LimitRequests: "requests per min (RPM)", LimitTokens: "tokens per min (TPM)"}[want.kind]
		text := fmt.Sprintf("Rate limit reached for %s in organization org-fakellm on %s: Limit %d, Used %d, Requested %d. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
			model, per, want.limit, want.used, want.requested, openAIDuration(want.wait))
		if want.wait == 0 {
			text = fmt.Sprintf("Request too large for %s in organization org-fakellm on %s: Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.",
				model, per, want.limit, want.requested)
		}
		if msg = checkError(t, api, res, wantErr{429, want.kind, "rate_limit_exceeded", text}); msg != text {
			t.Errorf("message %q\nwant %q", msg, text)
		}
	}
	if got := res.header.Get("Retry-After"); got != want.retryAfter {
		t.Errorf("retry-after %q, want %q", got, want.retryAfter)
	}
	wantMs := ""
	if want.wait > 0 && api != APIAnthropic {
		wantMs = strconv.FormatInt((want.wait + time.Millisecond - 1).Milliseconds(), 10)
	}
	if got := res.header.Get("Retry-After-Ms"); got != wantMs {
		t.Errorf("retry-after-ms %q, want %q", got, wantMs)
	}
	am := &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR,
		ErrorMessage: strconv.Itoa(res.status) + " " + msg, HttpStatus: int32(res.status)}
	if got := retry.Classify(am, retry.AbortState{}); got != retry.Transient {
		t.Errorf("retry.Classify(%q) = %v, want transient", msg, got)
	}
}

// TestRateLimitRefusal: a request a bucket cannot take gets the API's 429
// with retry hints, takes nothing, and goes through once the bucket has
// refilled enough.
func TestRateLimitRefusal(t *testing.T) {
	ts, clk := startLimited(t, `{
		"rules": [{"match": {"model": "long"}, "respond": {"text": "`+strings.Repeat("x", 3600)+`"}}],
		"limits": [{"model": "m", "rpm": 2}, {"model": "long", "tpm": 1000}, {"model": "huge", "tpm": 1000}]}`)
	for _, api := range apis {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", api, stream), func(t *testing.T) {
				ts.srv.ResetClock()
				t.Run("requests", func(t *testing.T) {
					for i := range 2 {
						if res := ts.call(req{api: api, stream: stream}); res.status != 200 {
							t.Fatalf("request %d: %d %s", i, res.status, res.body)
						}
					}
					// 2 rpm: a request every 30 s. OpenAI counts the refused
					// request too (TestRateLimitRefusalsCount): it waits for two.
					wait, full := 30*time.Second, time.Minute
					if api != APIAnthropic {
						wait, full = time.Minute, 90*time.Second
					}
					res := ts.call(req{api: api, stream: stream})
					checkRefusal(t, api, "m", res, refusal{LimitRequests, 2, 2, 1, wait, retryAfter(wait)})
					checkHeaders(t, "refused", res, wantRate(api, clk.Now(), [3]int64{2, 0, int64(full)}, [3]int64{}))
					clk.Advance(wait)
					if res := ts.call(req{api: api, stream: stream}); res.status != 200 {
						t.Errorf("after %v: %d %s", wait, res.status, res.body)
					}
				})
				t.Run("tokens", func(t *testing.T) {
					// 900 reserved, 900 answered (3600 bytes): 100 - in left.
					first := withMax(req{api: api, model: "long", stream: stream}, 900)
					if res := ts.call(first); res.status != 200 {
						t.Fatalf("first: %d %s", res.status, res.body)
					}
					second := withMax(req{api: api, model: "long", stream: stream}, 100)
					in1, in2 := inputTokens(first), inputTokens(second)
					left := 100 - in1
					need := in2 + 100
					wait := time.Duration(need-left) * 60 * time.Millisecond // 1000 tpm: 60 ms a token
					checkRefusal(t, api, "long", ts.call(second), refusal{LimitTokens, 1000, 1000 - left, need, wait, retryAfter(wait)})
					clk.Advance(wait)
					if res := ts.call(second); res.status != 200 {
						t.Errorf("after %v: %d %s", wait, res.status, res.body)
					}
				})
				t.Run("too large", func(t *testing.T) {
					r := withMax(req{api: api, model: "huge", stream: stream}, 5000)
					checkRefusal(t, api, "huge", ts.call(r), refusal{LimitTokens, 1000, 0, inputTokens(r) + 5000, 0, ""})
				})
			})
		}
	}
}

// TestRateLimitRefill: the buckets refill continuously on the server's
// clock, up to their limits; the headers count down to full.
func TestRateLimitRefill(t *testing.T) {
	ts, clk := startLimited(t, `{"limits": [{"rpm": 3, "tpm": 6000}]}`)
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			ts.srv.ResetClock()
			r := withMax(req{api: api}, 0) // no output reserved: the answer's output is taken once settled
			in, out := inputTokens(r), int64(len(DefaultText)/4)
			// 3 rpm: a request every 20 s; 6000 tpm: a token every 10 ms.
			rate := func(requests, reqFull, used int64) map[string]string {
				return wantRate(api, clk.Now(), [3]int64{3, requests, reqFull * int64(time.Second)},
					[3]int64{6000, 6000 - used, used * int64(10*time.Millisecond)})
			}
			for i := range int64(3) {
				checkHeaders(t, fmt.Sprintf("request %d", i), ts.call(r), rate(2-i, 20*(i+1), i*(in+out)+in))
			}
			clk.Advance(20 * time.Second) // one request back; the tokens full again
			checkHeaders(t, "after 20 s", ts.call(r), rate(0, 60, in))
			clk.Advance(10 * time.Second) // half a request: the headers say so
			checkHeaders(t, "after 30 s", ts.peek(r), rate(0, 50, 0))
			clk.Advance(10 * time.Second)
			checkHeaders(t, "after 40 s", ts.call(r), rate(0, 60, in))
			clk.Advance(time.Hour) // never more than the limit
			checkHeaders(t, "after an hour", ts.call(r), rate(2, 20, in))
		})
	}
}

// TestRateLimitAfterRules: rules answer first; their errors take nothing
// from the buckets but carry the headers, and a rule's own headers win.
func TestRateLimitAfterRules(t *testing.T) {
	ts, clk := startLimited(t, `{
		"rules": [
			{"name": "outage", "match": {"first": 2}, "respond": {"preset": "unavailable"}},
			{"name": "in-stream", "match": {"model": "se"}, "respond": {"stream_error": true}},
			{"name": "own", "match": {"model": "own"}, "respond": {"headers": {"x-ratelimit-remaining-requests": "77", "anthropic-ratelimit-requests-remaining": "77"}}}
		],
		"limits": [{"rpm": 1}]}`)
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			ts.srv.ResetClock()
			ts.srv.SetScenario(ts.srv.sc) // "first" starts over
			full := wantRate(api, clk.Now(), [3]int64{1, 1, 0}, [3]int64{})
			for i := range 2 {
				res := ts.call(req{api: api, stream: true})
				if res.status != 503 {
					t.Fatalf("outage %d: %d", i, res.status)
				}
				checkHeaders(t, "outage", res, full)
			}
			res := ts.call(req{api: api, model: "se", stream: true})
			if res.status != 200 || len(res.events) != 1 {
				t.Errorf("in-stream error: %d %q", res.status, names(res.events))
			}
			checkHeaders(t, "in-stream error", res, full)
			if res := ts.call(req{api: api, stream: true}); res.status != 200 {
				t.Errorf("first success: %d %s", res.status, res.body)
			}
			wait := time.Minute // 1 rpm; OpenAI counts the refused request too
			if api != APIAnthropic {
				wait = 2 * time.Minute
			}
			checkRefusal(t, api, "m", ts.call(req{api: api}), refusal{LimitRequests, 1, 1, 1, wait, retryAfter(wait)})
			res = ts.call(req{api: api, model: "own"})
			own := map[bool]string{true: "anthropic-ratelimit-requests-remaining", false: "x-ratelimit-remaining-requests"}[api == APIAnthropic]
			if res.status != 200 || rateHeaders(res.header)[own] != "77" {
				t.Errorf("own headers: %d %v", res.status, rateHeaders(res.header))
			}
		})
	}
}

// TestRateLimitRejected: a request the server rejects itself carries the
// headers of its key and model when it names both.
func TestRateLimitRejected(t *testing.T) {
	ts, clk := startLimited(t, `{"limits": [{"rpm": 5}]}`)
	r := req{api: APIAnthropic}.httpRequest(t, ts.base)
	r.Body = nopCloser(`{"model":"m"}`)
	r.ContentLength = int64(len(`{"model":"m"}`))
	resp, err := ts.client.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	res := result{status: resp.StatusCode, header: resp.Header, body: readAll(t, resp)}
	if res.status != 400 {
		t.Fatalf("status %d %s", res.status, res.body)
	}
	checkHeaders(t, "rejected", res, wantRate(APIAnthropic, clk.Now(), [3]int64{5, 5, 0}, [3]int64{}))
}

// TestRateLimitStats: the buckets' 429s count under "(rate_limit)" and by
// the limit that refused.
func TestRateLimitStats(t *testing.T) {
	ts, _ := startLimited(t, `{"limits": [{"model": "m", "rpm": 1}, {"model": "t", "tpm": 100}]}`)
	for range 3 {
		ts.call(req{api: APIOpenAIChat})
	}
	ts.call(withMax(req{api: APIAnthropic, model: "t"}, 500))
	st := ts.srv.Stats()
	if st.ByRule[labelRateLimit] != 3 || st.ByRule[labelDefault] != 1 || st.ByStatus["429"] != 3 || st.Errors != 3 ||
		st.ByLimit[LimitRequests] != 2 || st.ByLimit[LimitTokens] != 1 {
		t.Errorf("stats %+v", st)
	}
	resp, err := ts.client.Get(ts.base + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if body := string(readAll(t, resp)); !strings.Contains(body, `"(rate_limit)": 3`) || !strings.Contains(body, `"by_limit": {`) {
		t.Errorf("GET /stats: %s", body)
	}
	ts.srv.ResetStats()
	if st := ts.srv.Stats(); len(st.ByLimit) != 0 {
		t.Errorf("after ResetStats: %+v", st.ByLimit)
	}
}

// TestRateLimitFile: testdata/ratelimit.json limits two keys, 600 rpm and
// 200,000 tpm each, and turns every other key away.
func TestRateLimitFile(t *testing.T) {
	sc := loadTestdata(t, "ratelimit.json")
	want := []Limit{{Key: "key-a", RPM: 600, TPM: 200000}, {Key: "key-b", RPM: 600, TPM: 200000}}
	if fmt.Sprint(sc.Limits) != fmt.Sprint(want) {
		t.Errorf("limits %+v, want %+v", sc.Limits, want)
	}
	ts := start(t, sc)
	for _, key := range []string{"key-a", "key-b"} {
		res := ts.call(req{api: APIOpenAIChat, key: key})
		if res.status != 200 || res.header.Get("X-Ratelimit-Limit-Requests") != "600" || res.header.Get("X-Ratelimit-Limit-Tokens") != "200000" {
			t.Errorf("%s: %d %v", key, res.status, rateHeaders(res.header))
		}
	}
	if res := ts.call(req{api: APIOpenAIChat, key: "key-c"}); res.status != 401 {
		t.Errorf("key-c: %d", res.status)
	}
}

// TestBadLimits: the limits are checked like the rest of a scenario.
func TestBadLimits(t *testing.T) {
	for _, tc := range []struct {
		name, doc, path, msg string
	}{
		{"not an array", `{"limits": {}}`, "limits", "must be an array"},
		{"entry not an object", `{"limits": [5]}`, "limits[0]", "must be an object"},
		{"unknown field", `{"limits": [{"rmp": 5}]}`, "limits[0].rmp", "unknown field (allowed: key, model, rpm, tpm, itpm, otpm, window_ms)"},
		{"rpm string", `{"limits": [{"rpm": "600"}]}`, "limits[0].rpm", "must be an integer"},
		{"rpm fractional", `{"limits": [{"rpm": 1.5}]}`, "limits[0].rpm", "must be an integer"},
		{"rpm negative", `{"limits": [{"rpm": -1, "tpm": 5}]}`, "limits[0].rpm", "must be 0-1000000000, got -1"},
		{"tpm too large", `{"limits": [{"tpm": 1000000001}]}`, "limits[0].tpm", "must be 0-1000000000"},
		{"key not string", `{"limits": [{"key": 1, "rpm": 5}]}`, "limits[0].key", "must be a string"},
		{"no limit", `{"limits": [{"key": "a"}]}`, "limits[0]", "needs rpm, tpm, itpm or otpm"},
		{"zero limits", `{"limits": [{"rpm": 0, "tpm": 0, "itpm": 0, "otpm": 0}]}`, "limits[0]", "needs rpm, tpm, itpm or otpm"},
		{"window only", `{"limits": [{"window_ms": 1000}]}`, "limits[0]", "needs rpm, tpm, itpm or otpm"},
		{"itpm negative", `{"limits": [{"itpm": -1}]}`, "limits[0].itpm", "must be 0-1000000000, got -1"},
		{"otpm too large", `{"limits": [{"otpm": 1000000001}]}`, "limits[0].otpm", "must be 0-1000000000"},
		{"otpm string", `{"limits": [{"otpm": "8000"}]}`, "limits[0].otpm", "must be an integer"},
		{"window negative", `{"limits": [{"rpm": 1, "window_ms": -1}]}`, "limits[0].window_ms", "must be 0-60000, got -1"},
		{"window over a minute", `{"limits": [{"rpm": 1, "window_ms": 60001}]}`, "limits[0].window_ms", "must be 0-60000, got 60001"},
		{"window fractional", `{"limits": [{"rpm": 1, "window_ms": 0.5}]}`, "limits[0].window_ms", "must be an integer"},
		{"duplicate", `{"limits": [{"key": "a", "rpm": 1}, {"key": "a", "tpm": 1}]}`, "limits[1]", "never applies: limits[0]"},
		{"shadowed", `{"limits": [{"rpm": 1}, {"key": "a", "model": "m", "rpm": 2}]}`, "limits[1]", `limits[0] (key "", model "")`},
		{"shadowed by model", `{"limits": [{"key": "a", "rpm": 1}, {"model": "m", "rpm": 1}, {"key": "a", "model": "m", "rpm": 2}]}`, "limits[2]", "never applies: limits[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseScenario([]byte(tc.doc))
			var se *ScenarioError
			if !errors.As(err, &se) || se.Path != tc.path || !strings.Contains(se.Msg, tc.msg) {
				t.Errorf("error %v\nwant path %q and a message with %q", err, tc.path, tc.msg)
			}
		})
	}
	sc := &Scenario{Limits: []Limit{{Key: "a", RPM: 1}, {TPM: -5}}}
	if err := sc.Validate(); err == nil || err.Error() != "limits[1].tpm: must be 0-1000000000, got -5" {
		t.Errorf("Validate = %v", err)
	}
	ok := mustParse(t, `{"limits": [{"key": "a", "model": "m", "rpm": 1}, {"key": "a", "tpm": 2}, {"model": "m", "itpm": 3, "otpm": 4},
		{"rpm": 4, "tpm": 5, "itpm": 6, "otpm": 7, "window_ms": 60000}]}`)
	if len(ok.Limits) != 4 || ok.Limits[2] != (Limit{Model: "m", ITPM: 3, OTPM: 4}) ||
		ok.Limits[3] != (Limit{RPM: 4, TPM: 5, ITPM: 6, OTPM: 7, WindowMs: 60000}) {
		t.Errorf("limits %+v", ok.Limits)
	}
}
