package fakellm

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Scenarios of the rules the rate limits take from the providers' pages
// (README.md, "Rate limits"; the code quotes them): each sends requests on
// a test clock and checks what every one of them gets.

var (
	openAIAPIs   = []string{APIOpenAIChat, APIOpenAIResponses}
	anthropicAPI = []string{APIAnthropic}
)

// step is one request of a rate-limit scenario and what it must get.
type step struct {
	advance time.Duration     // the clock moves this much first
	r       req               // its api is the case's
	times   int               // sent this many times (0: once), each must get status
	status  int               // 200 or 429
	retry   string            // the last answer's retry-after ("": none)
	kind    string            // a 429's body names this limit
	headers map[string]string // some of the last answer's rate-limit headers ("": absent)
}

// rlCase is a scenario for some APIs.
type rlCase struct {
	name  string
	apis  []string
	steps []step
}

// runCases runs every case for each of its APIs, from full buckets.
func runCases(t *testing.T, ts *testServer, clk *testClock, cases []rlCase) {
	t.Helper()
	for _, tc := range cases {
		for _, api := range tc.apis {
			t.Run(tc.name+"/"+api, func(t *testing.T) {
				ts.srv.ResetClock()
				for i, s := range tc.steps {
					runStep(t, ts, clk, api, i, s)
				}
			})
		}
	}
}

// runStep sends step i of a case for api and checks what it got.
func runStep(t *testing.T, ts *testServer, clk *testClock, api string, i int, s step) {
	t.Helper()
	clk.Advance(s.advance)
	r := s.r
	r.api = api
	var res result
	for n := range max(1, s.times) {
		if res = ts.call(r); res.status != s.status {
			t.Fatalf("step %d (%d of %d): status %d, want %d: %s", i, n+1, max(1, s.times), res.status, s.status, res.body)
		}
	}
	if got := res.header.Get("Retry-After"); got != s.retry {
		t.Errorf("step %d: retry-after %q, want %q", i, got, s.retry)
	}
	if !strings.Contains(string(res.body), s.kind) {
		t.Errorf("step %d: the 429 does not name %q: %s", i, s.kind, res.body)
	}
	got := rateHeaders(res.header)
	for name, want := range s.headers {
		if got[name] != want {
			t.Errorf("step %d: %s %q, want %q", i, name, got[name], want)
		}
	}
}

// levels is what the minute holds of the tokens (TPM) and output (OTPM)
// buckets of the test key and model (NaN for no bucket).
func levels(ts *testServer, model string) (tokens, output float64) {
	ts.srv.mu.Lock()
	defer ts.srv.mu.Unlock()
	st := ts.srv.limits[limitKey{"test-key", model}]
	level := func(b *bucket) float64 {
		if st == nil || b == nil {
			return math.NaN()
		}
		b.refill(ts.srv.clock())
		return b.minute
	}
	if st == nil {
		return math.NaN(), math.NaN()
	}
	return level(st.tokens), level(st.output)
}

// TestRateLimitRefusalsCount: OpenAI counts a refused request against
// the requests limit ("Note that unsuccessful requests contribute to your
// per-minute limit, so continuously resending a request won't work");
// Anthropic says nothing of the kind, and its refusals take nothing.
func TestRateLimitRefusalsCount(t *testing.T) {
	ts, clk := startLimited(t, `{"limits": [{"model": "one", "rpm": 1}, {"rpm": 2}]}`)
	// 2 rpm: a request every 30 s.
	refused := func(advance time.Duration, retry string) step {
		return step{advance: advance, status: 429, retry: retry, kind: "requests"}
	}
	ok := func(advance time.Duration) step { return step{advance: advance, status: 200} }
	one := req{model: "one"}
	runCases(t, ts, clk, []rlCase{
		{"the refusal is one more request to wait for", openAIAPIs, []step{
			{times: 2, status: 200}, refused(0, "60"), refused(59*time.Second, "31"), ok(31 * time.Second)}},
		{"a refusal takes nothing", anthropicAPI, []step{
			{times: 2, status: 200}, refused(0, "30"), refused(29*time.Second, "1"), ok(time.Second)}},
		// Resending every 25 s, faster than the limit refills.
		{"continuously resending never gets through", openAIAPIs, []step{
			{times: 2, status: 200}, refused(25*time.Second, "35"), refused(25*time.Second, "40"),
			refused(25*time.Second, "45"), refused(25*time.Second, "50")}},
		{"resending gets through as the limit refills", anthropicAPI, []step{
			{times: 2, status: 200}, refused(25*time.Second, "5"), ok(25 * time.Second), ok(25 * time.Second), ok(25 * time.Second)}},
		// The debt of a storm of refusals is one window's worth at most.
		{"a storm of refusals owes one window at most", openAIAPIs, []step{
			{r: one, status: 200}, {r: one, times: 10, status: 429, retry: "120", kind: "requests"},
			{r: one, advance: 120 * time.Second, status: 200}}},
		{"a storm of refusals owes nothing", anthropicAPI, []step{
			{r: one, status: 200}, {r: one, times: 10, status: 429, retry: "60", kind: "requests"},
			{r: one, advance: 60 * time.Second, status: 200}}},
	})
	if st := ts.srv.Stats(); st.ByLimit[LimitRequests] != 2*(1+1+4+10)+(2+1+10) {
		t.Errorf("by_limit %v", st.ByLimit)
	}
}

// TestRateLimitWindow: a per-minute limit L with window_ms w lets at most
// L·w/60000 through at once ("60,000 requests/minute may be enforced as
// 1,000 requests/second"; "a rate of 60 requests per minute (RPM) may be
// enforced as 1 request per second"), while the headers report the
// per-minute limit and what remains of the minute.
func TestRateLimitWindow(t *testing.T) {
	ts, clk := startLimited(t, `{"limits": [
		{"model": "burst", "rpm": 600, "window_ms": 1000},
		{"model": "minute", "rpm": 600},
		{"model": "half", "rpm": 30, "window_ms": 1000},
		{"model": "big", "tpm": 60000, "window_ms": 1000},
		{"model": "bigin", "itpm": 60000, "window_ms": 1000}]}`)
	burst, minute, half := req{model: "burst"}, req{model: "minute"}, req{model: "half"}
	bigOut, small := withMax(req{api: APIOpenAIChat, model: "big"}, 1500), withMax(req{api: APIOpenAIChat, model: "big"}, 10)
	bigIn := req{api: APIAnthropic, model: "bigin", extra: map[string]any{"system": strings.Repeat("x", 6000)}}
	runCases(t, ts, clk, []rlCase{
		// 600 rpm over 1 s windows: 10 at once, then one every 100 ms.
		{"10 at once of 600 rpm", openAIAPIs, []step{
			{r: burst, times: 10, status: 200, headers: map[string]string{"x-ratelimit-remaining-requests": "590"}},
			{r: burst, status: 429, retry: "1", kind: `"type":"requests"`, headers: map[string]string{
				"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "589", "retry-after-ms": "200"}},
			{r: burst, advance: 200 * time.Millisecond, status: 200}}},
		{"10 at once of 600 rpm", anthropicAPI, []step{
			{r: burst, times: 10, status: 200, headers: map[string]string{"anthropic-ratelimit-requests-remaining": "590"}},
			{r: burst, status: 429, retry: "1", kind: "of 600 requests per minute", headers: map[string]string{
				"anthropic-ratelimit-requests-limit": "600", "anthropic-ratelimit-requests-remaining": "590"}},
			{r: burst, advance: 100 * time.Millisecond, status: 200}}},
		{"the same burst within a minute", apis, []step{{r: minute, times: 11, status: 200}}},
		// 30 rpm over 1 s windows: half a request a window, one every 2 s.
		{"less than one a window", apis, []step{
			{r: half, status: 200}, {r: half, status: 429, retry: "2", kind: "requests"},
			{r: half, advance: 2 * time.Second, status: 200}}},
		// 60,000 tpm over 1 s windows: 1,000 tokens a window. A request of
		// more waits for a full window, then leaves the bucket in debt.
		{"a context larger than the window", []string{APIOpenAIChat}, []step{
			{r: bigOut, status: 200, headers: map[string]string{
				"x-ratelimit-remaining-tokens": strconv.FormatInt(60000-inputTokens(bigOut)-1500, 10)}},
			{r: small, status: 429, retry: "1", kind: `"type":"tokens"`},
			{r: small, advance: time.Second, status: 200}}},
		{"an input larger than the window", anthropicAPI, []step{
			{r: bigIn, status: 200},
			{r: req{model: "bigin"}, status: 429, retry: "1", kind: "of 60,000 input tokens per minute"},
			{r: req{model: "bigin"}, advance: time.Second, status: 200}}},
	})
}

// TestRateLimitMaxTokens: the output limit a request asks for is taken
// at admission. Anthropic gives back what the answer did not use ("the
// estimate is adjusted at the end of the request to reflect the actual
// number of output tokens used"); OpenAI does not. Output beyond it is
// taken at the end by both.
func TestRateLimitMaxTokens(t *testing.T) {
	ts, _ := startLimited(t, `{
		"rules": [{"match": {"model": "long"}, "respond": {"text": "`+strings.Repeat("x", 4000)+`"}}],
		"limits": [{"tpm": 100000, "otpm": 10000}]}`)
	short := int64(len(DefaultText) / 4)
	for _, tc := range []struct {
		name     string
		model    string
		max, out int64
	}{
		{"max_tokens 2000, answer of 4", "m", 2000, short},
		{"max_tokens 100, answer of 1000", "long", 100, 1000},
	} {
		for _, api := range apis {
			for _, stream := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/stream=%v", tc.name, api, stream), func(t *testing.T) {
					ts.srv.ResetClock()
					r := withMax(req{api: api, model: tc.model, stream: stream}, int(tc.max))
					in := inputTokens(r)
					res := ts.call(r)
					if res.status != 200 {
						t.Fatalf("status %d %s", res.status, res.body)
					}
					// What the headers, sent before the answer, say was taken.
					atAdmission := map[string]string{"x-ratelimit-remaining-tokens": strconv.FormatInt(100000-in-tc.max, 10)}
					if api == APIAnthropic {
						atAdmission = wantBuckets(api, time.Time{}, map[string][3]int64{
							"tokens": {100000, 100000 - in - tc.max}, "output-tokens": {10000, 10000 - tc.max}})
						delete(atAdmission, "anthropic-ratelimit-tokens-reset")
						delete(atAdmission, "anthropic-ratelimit-output-tokens-reset")
					}
					got := rateHeaders(res.header)
					for name, want := range atAdmission {
						if !strings.HasSuffix(name, "-limit") && got[name] != want {
							t.Errorf("%s %q, want %q", name, got[name], want)
						}
					}
					// What is taken once the answer is over.
					wantTokens, wantOutput := float64(100000-in-max(tc.max, tc.out)), math.NaN()
					if api == APIAnthropic {
						wantTokens, wantOutput = float64(100000-in-tc.out), float64(10000-tc.out)
					}
					tokens, output := levels(ts, tc.model)
					if math.Abs(tokens-wantTokens) > 1e-6 || (api == APIAnthropic && math.Abs(output-wantOutput) > 1e-6) {
						t.Errorf("after the answer: tokens %v, output %v; want %v, %v", tokens, output, wantTokens, wantOutput)
					}
				})
			}
		}
	}
}

// TestRateLimitInputOutput: Anthropic's input (ITPM) and output (OTPM)
// limits are separate buckets with headers of their own, and its tokens-*
// headers report their sum; OpenAI has neither (one TPM).
func TestRateLimitInputOutput(t *testing.T) {
	ts, clk := startLimited(t, `{
		"rules": [{"match": {"model": "full"}, "respond": {"text": "`+strings.Repeat("x", 12000)+`"}}],
		"limits": [{"model": "in", "itpm": 1000, "otpm": 10000}, {"itpm": 100000, "otpm": 10000}]}`)
	m := withMax(req{api: APIAnthropic}, 3000)
	full := withMax(req{api: APIAnthropic, model: "full"}, 3000) // answers 3,000 tokens: nothing comes back
	long := req{api: APIAnthropic, model: "in", extra: map[string]any{"system": strings.Repeat("x", 2000)}}
	in, inLong := inputTokens(m), inputTokens(long)
	// The second long input waits for 2·inLong - 1000 tokens at 1000/60 a second.
	inWait := time.Duration(2*inLong-1000) * 60 * time.Millisecond
	runCases(t, ts, clk, []rlCase{
		{"the headers of each limit and of their sum", anthropicAPI, []step{{r: m, status: 200, headers: map[string]string{
			"anthropic-ratelimit-input-tokens-limit": "100000", "anthropic-ratelimit-input-tokens-remaining": strconv.FormatInt(nearestThousand(100000-in), 10),
			"anthropic-ratelimit-output-tokens-limit": "10000", "anthropic-ratelimit-output-tokens-remaining": "7000",
			"anthropic-ratelimit-tokens-limit": "110000", "anthropic-ratelimit-tokens-remaining": strconv.FormatInt(nearestThousand(110000-in-3000), 10)}}}},
		{"the output limit refuses while input has room", anthropicAPI, []step{
			{r: full, times: 3, status: 200},
			{r: full, status: 429, retry: "12", kind: "of 10,000 output tokens per minute", headers: map[string]string{
				"anthropic-ratelimit-output-tokens-remaining": "1000", "anthropic-ratelimit-input-tokens-remaining": "100000"}}}},
		{"the input limit refuses while output has room", anthropicAPI, []step{
			{r: long, status: 200},
			{r: long, status: 429, retry: retryAfter(inWait), kind: "of 1,000 input tokens per minute", headers: map[string]string{
				"anthropic-ratelimit-output-tokens-remaining": "10000", "anthropic-ratelimit-input-tokens-limit": "1000"}},
			{r: long, advance: inWait + time.Millisecond, status: 200}}},
		{"no input or output limits", []string{APIOpenAIChat}, []step{{r: withMax(req{api: APIOpenAIChat}, 100000), times: 3, status: 200,
			headers: map[string]string{"x-ratelimit-limit-tokens": "", "x-ratelimit-remaining-tokens": ""}}}},
		{"no input or output limits", []string{APIOpenAIResponses}, []step{{r: withMax(req{api: APIOpenAIResponses}, 100000), times: 3, status: 200,
			headers: map[string]string{"x-ratelimit-limit-tokens": "", "x-ratelimit-remaining-tokens": ""}}}},
	})
	if st := ts.srv.Stats(); st.ByLimit[LimitInputTokens] != 1 || st.ByLimit[LimitOutputTokens] != 1 || st.ByLimit[LimitTokens] != 0 {
		t.Errorf("by_limit %v", st.ByLimit)
	}
}

// TestRateLimitHeadersBeforeBody: the rate-limit headers are HTTP response
// headers, so a streamed answer sends them before its first event, with
// what admission took ("OTPM rate limits are estimated based on max_tokens
// at the beginning of each request"); what comes back comes back at the
// end.
func TestRateLimitHeadersBeforeBody(t *testing.T) {
	ts, _ := startLimited(t, `{
		"rules": [{"match": {"model": "slow"}, "respond": {"stall_ms": 30000}}],
		"limits": [{"rpm": 10, "tpm": 100000, "otpm": 10000}]}`)
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			ts.srv.ResetClock()
			r := withMax(req{api: api, model: "slow", stream: true}, 2000)
			in := inputTokens(r)
			start := time.Now()
			resp := ts.do(r) // returns with the headers
			if d := time.Since(start); resp.StatusCode != 200 || d > 10*time.Second {
				t.Fatalf("status %d after %v", resp.StatusCode, d)
			}
			want := map[string]string{"x-ratelimit-remaining-requests": "9", "x-ratelimit-remaining-tokens": strconv.FormatInt(100000-in-2000, 10)}
			if api == APIAnthropic {
				want = map[string]string{"anthropic-ratelimit-requests-remaining": "9", "anthropic-ratelimit-output-tokens-remaining": "8000"}
			}
			got := rateHeaders(resp.Header)
			for name, v := range want {
				if got[name] != v {
					t.Errorf("%s %q, want %q", name, got[name], v)
				}
			}
			ended := make(chan struct{})
			go func() {
				defer close(ended)
				_, _ = io.Copy(io.Discard, resp.Body)
			}()
			select {
			case <-ended:
				t.Error("the body ended with the headers")
			case <-time.After(50 * time.Millisecond):
			}
			resp.Body.Close()
			<-ended
			waitIdle(t, ts.srv)
			_, output := levels(ts, "slow")
			if want := 10000 - float64(len(DefaultText)/4); api == APIAnthropic && output != want {
				t.Errorf("output tokens after the answer: %v, want %v", output, want)
			}
		})
	}
}

// TestRateLimitQuantizedFile: testdata/quantized.json gives key-a the
// tier-1 limits of a Claude model (50 rpm, 30,000 input and 8,000 output
// tokens a minute) and of an OpenAI one (500 rpm, 30,000 tpm), each
// enforced over 1 s windows.
func TestRateLimitQuantizedFile(t *testing.T) {
	ts := start(t, loadTestdata(t, "quantized.json"))
	clk := newTestClock()
	ts.srv.SetClock(clk.Now)
	claude, gpt := req{key: "key-a", model: "claude"}, req{key: "key-a", model: "gpt"}
	runCases(t, ts, clk, []rlCase{
		// 50 rpm over 1 s windows: one request every 1.2 s.
		{"claude", anthropicAPI, []step{
			{r: claude, status: 200, headers: map[string]string{"anthropic-ratelimit-requests-limit": "50",
				"anthropic-ratelimit-input-tokens-limit": "30000", "anthropic-ratelimit-output-tokens-limit": "8000",
				"anthropic-ratelimit-tokens-limit": "38000"}},
			{r: claude, status: 429, retry: "2", kind: "of 50 requests per minute"},
			{r: claude, advance: 1200 * time.Millisecond, status: 200}}},
		// 500 rpm over 1 s windows: 8 at once.
		{"gpt", []string{APIOpenAIChat}, []step{
			{r: gpt, times: 8, status: 200},
			{r: gpt, status: 429, retry: "1", kind: `"type":"requests"`, headers: map[string]string{
				"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "491", "x-ratelimit-limit-tokens": "30000"}}}},
	})
	if res := ts.call(req{api: APIAnthropic, key: "key-b"}); res.status != 401 {
		t.Errorf("key-b: %d", res.status)
	}
}

// TestBucketWindow: a bucket over a window holds at most limit·w/60 and
// refills at limit/60 a second; its minute, which the headers report,
// holds the limit.
func TestBucketWindow(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		window time.Duration
		burst  float64
	}{{0, 600}, {time.Second, 10}, {10 * time.Second, 100}, {time.Minute, 600}, {2 * time.Minute, 600}} {
		if b := newBucket(600, tc.window, t0); b.burst != tc.burst || b.level != tc.burst || b.minute != 600 {
			t.Errorf("window %v: burst %v, level %v, minute %v; want %v, %v, 600", tc.window, b.burst, b.level, b.minute, tc.burst, tc.burst)
		}
	}
	b := newBucket(600, time.Second, t0)
	if cs := []charge{{LimitRequests, b, 1}}; admit(cs) != nil {
		t.Fatal("a full window refused one request")
	}
	b.add(-9)
	if b.remaining() != 590 || b.until(1) != 100*time.Millisecond || b.untilFull() != time.Second || b.needs(25) != 10 {
		t.Errorf("after 10: remaining %d, 1 in %v, full in %v, 25 needs %v", b.remaining(), b.until(1), b.untilFull(), b.needs(25))
	}
	if over := admit([]charge{{LimitRequests, b, 1}}); over == nil || over.wait != 100*time.Millisecond {
		t.Errorf("an empty window: %+v", over)
	}
	for range 30 {
		b.owe(1)
	}
	if b.level != -10 || b.minute != 560 {
		t.Errorf("after 30 refusals: level %v, minute %v; want -10 (one window of debt), 560", b.level, b.minute)
	}
	b.refill(t0.Add(time.Minute))
	if b.level != 10 || b.minute != 600 {
		t.Errorf("a minute later: level %v, minute %v", b.level, b.minute)
	}
	if over := admit([]charge{{LimitTokens, b, 601}}); over == nil || over.wait != 0 {
		t.Errorf("more than the limit: %+v, want too large", over)
	}
}
