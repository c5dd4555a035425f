package main

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// rlPrompt is what the ratelimit storm records of one prompt.
type rlPrompt struct {
	begun, ended bool
	ok           bool
	start, end   time.Duration // from the start of the run
	// input and output are the tokens of the request that answered it,
	// as the answer's usage reports them: the input as fakellm counts it
	// (request body bytes / 4), and the output.
	input, output int64
}

// rlRecorder records the prompts of one contender's ratelimit run, by
// session and prompt, and its provider requests. It is safe for
// concurrent use.
type rlRecorder struct {
	sc       *rateLimitScenario
	events   *recorder // requests and completions over time, for the timeline
	finished atomic.Int64

	mu       sync.Mutex
	start    time.Time
	prompts  []rlPrompt // session i's prompt j at i*sc.Prompts + j
	refused  []time.Duration
	sent     []rlRequest // the requests, for the per-key figures
	arrivals []rlArrival // as the server's front saw them
	waits    []rlWait    // MusePi's rate_limit_wait events
	requests atomic.Int64
	http429  atomic.Int64
}

func newRLRecorder(sc *rateLimitScenario) *rlRecorder {
	now := time.Now()
	return &rlRecorder{sc: sc, events: newRecorder(now), start: now, prompts: make([]rlPrompt, sc.totalPrompts())}
}

// restart makes now the start of the run.
func (r *rlRecorder) restart(now time.Time) {
	r.mu.Lock()
	r.start = now
	r.mu.Unlock()
	r.events.restart(now)
}

// begin records that session i sent its prompt j now.
func (r *rlRecorder) begin(i, j int) {
	now := time.Now()
	r.mu.Lock()
	p := &r.prompts[i*r.sc.Prompts+j]
	p.begun, p.start = true, now.Sub(r.start)
	r.mu.Unlock()
}

// finish records that session i's prompt j ended now: answered (ok) with
// input and output tokens, or failed.
func (r *rlRecorder) finish(i, j int, ok bool, input, output int64) {
	now := time.Now()
	r.mu.Lock()
	p := &r.prompts[i*r.sc.Prompts+j]
	first := !p.ended
	p.ended, p.ok, p.end, p.input, p.output = true, ok, now.Sub(r.start), input, output
	r.mu.Unlock()
	if first {
		r.finished.Add(1)
		if ok {
			r.events.completion(now)
		}
	}
}

// request records a provider request sent at at by session on key,
// refused with a 429 or not.
func (r *rlRecorder) request(at time.Time, session int, key string, refused bool) {
	r.requests.Add(1)
	r.events.request(at)
	if refused {
		r.http429.Add(1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d := at.Sub(r.start)
	r.sent = append(r.sent, rlRequest{at: d, session: session, key: key, refused: refused})
	if refused {
		r.refused = append(r.refused, d)
	}
}

// arrival records an API request that reached the server at at on key,
// refused with a 429 or not.
func (r *rlRecorder) arrival(at time.Time, key string, refused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.arrivals = append(r.arrivals, rlArrival{at: at.Sub(r.start), key: key, refused: refused})
}

// wait records a rate_limit_wait event: at at, session's turn began
// waiting for key.
func (r *rlRecorder) wait(at time.Time, session int, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, rlWait{at: at.Sub(r.start), session: session, key: key})
}

// keyLog is what the per-key figures need of the run so far, which ends
// at end; paced says whether the turns' waits are pacing waits.
func (r *rlRecorder) keyLog(end time.Time, paced bool) *rlKeyLog {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &rlKeyLog{sc: r.sc, paced: paced, requests: slices.Clone(r.sent), arrivals: slices.Clone(r.arrivals),
		waits: slices.Clone(r.waits), prompts: slices.Clone(r.prompts), end: end.Sub(r.start)}
}

// snapshot is a copy of the prompts recorded.
func (r *rlRecorder) snapshot() []rlPrompt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]rlPrompt(nil), r.prompts...)
}

// timeline is the requests, completions and 429s per bucket.
func (r *rlRecorder) timeline(bucket time.Duration) *Timeline {
	t := r.events.timeline(bucket)
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(t.Requests)
	for _, d := range r.refused {
		n = max(n, int(max(0, d)/bucket)+1)
	}
	t.Refused = make([]int, n)
	for _, d := range r.refused {
		t.Refused[int(max(0, d)/bucket)]++
	}
	return t
}

// jainIndex is Jain's fairness index of xs: (Σx)² / (n · Σx²), 1 when
// every x is equal, 1/n when one takes everything; 1 for no values or
// all zeros.
func jainIndex(xs []float64) float64 {
	var sum, squares float64
	for _, x := range xs {
		sum += x
		squares += x * x
	}
	if len(xs) == 0 || squares == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * squares)
}

// rlPriorities are the priorities the ratelimit storm reports on, by
// figure suffix: the high sessions and the low ones.
var rlPriorities = []struct {
	suffix string
	high   bool
}{{"high", true}, {"low", false}}

// promptLatencies are the latencies of sc's completed prompts, in all
// and by priority (high: true), each session's mean latency in ms by
// priority, the prompts completed and failed, and the completed ones'
// tokens: what fakellm charged their keys' TPM, their input and their
// output.
type promptLatencies struct {
	all                    []time.Duration
	byPriority             map[bool][]time.Duration
	means                  map[bool][]float64
	completed, failed      int
	charged, input, output int64
}

// latenciesOf reads prompts (recorded on sc).
func latenciesOf(sc *rateLimitScenario, prompts []rlPrompt) promptLatencies {
	l := promptLatencies{byPriority: map[bool][]time.Duration{}, means: map[bool][]float64{}}
	for i := range sc.Sessions {
		high := sc.high(i)
		var sum time.Duration
		n := 0
		for j := range sc.Prompts {
			switch p := prompts[i*sc.Prompts+j]; {
			case p.ended && p.ok:
				d := p.end - p.start
				l.completed++
				l.charged, l.input, l.output = l.charged+sc.charged(p.input, p.output), l.input+p.input, l.output+p.output
				l.all, l.byPriority[high] = append(l.all, d), append(l.byPriority[high], d)
				sum, n = sum+d, n+1
			case p.ended:
				l.failed++
			}
		}
		if n > 0 {
			l.means[high] = append(l.means[high], durationMs(sum)/float64(n))
		}
	}
	return l
}

// promptFigures adds the prompt figures of prompts (recorded on sc) to f:
// counts, latencies (overall and per priority), Jain's index per priority
// and the lowest of them, tokens per prompt, and goodput against the
// physical limit over minutes.
func promptFigures(f map[string]float64, sc *rateLimitScenario, prompts []rlPrompt, minutes float64) {
	l := latenciesOf(sc, prompts)
	f["prompts_started"] = float64(sc.totalPrompts())
	f["prompts_completed"], f["prompts_failed"] = float64(l.completed), float64(l.failed)
	f["prompts_lost"] = float64(sc.totalPrompts() - l.completed - l.failed)
	p50, p99, _ := percentiles(l.all)
	f["p50_prompt_latency_ms"], f["p99_prompt_latency_ms"] = durationMs(p50), durationMs(p99)
	jain := math.Inf(1)
	for _, pr := range rlPriorities {
		if len(l.byPriority[pr.high]) == 0 {
			continue
		}
		_, p99, _ := percentiles(l.byPriority[pr.high])
		f["p99_prompt_latency_ms_"+pr.suffix] = durationMs(p99)
		j := jainIndex(l.means[pr.high])
		f["jain_fairness_"+pr.suffix] = j
		jain = min(jain, j)
	}
	if !math.IsInf(jain, 1) {
		f["jain_fairness"] = jain
	}
	hi, okHi := f["p99_prompt_latency_ms_high"]
	if lo, okLo := f["p99_prompt_latency_ms_low"]; okHi && okLo && lo > 0 {
		f["p99_high_vs_low"] = hi / lo
	}
	goodputFigures(f, sc, &l, minutes)
}

// goodputFigures adds the goodput figures of l: the mean tokens fakellm
// charged a completed prompt (and its input and output), the keys'
// physical limit in prompts per minute at that cost, the completed
// prompts per minute and their ratio to the limit over the run
// (goodputVsLimit).
func goodputFigures(f map[string]float64, sc *rateLimitScenario, l *promptLatencies, minutes float64) {
	if l.completed == 0 || minutes <= 0 {
		return
	}
	n := float64(l.completed)
	c := rlCost{tokens: float64(l.charged) / n, input: float64(l.input) / n, output: float64(l.output) / n}
	perMinute := sc.limitPerMinute(c)
	f["tokens_per_prompt"], f["input_tokens_per_prompt"], f["output_tokens_per_prompt"] = c.tokens, c.input, c.output
	f["limit_prompts_per_minute"] = perMinute
	f["prompts_per_minute"] = n / minutes
	f["run_minutes"] = minutes
	f["goodput_vs_limit"] = goodputVsLimit(l.completed, minutes, perMinute, sc.burstMinutes())
}
