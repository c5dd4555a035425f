package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/musepi/musepi/provider/fakellm"
)

// The overload scenario (issue 40): the ratelimit scenario's sessions and
// prompts sent to one key with no rate limit, but to a model whose
// capacity changes: High calls in flight, Low for a while, then High
// again. A call beyond the capacity is answered with the provider's
// overload answer (503 on the OpenAI wire, 529 on Anthropic's), which
// announces nothing: no retry-after, no headers to pace by.

// ovCapacity is the model's capacity over the run: High calls in flight,
// Low from LowStart for LowFor, then High again. A call takes LatencyMs
// to answer with no other call in flight, twice that when the model is
// full (fakellm.Capacity).
type ovCapacity struct {
	High, Low        int
	LowStart, LowFor time.Duration
	LatencyMs        int
}

// returnAt is when the capacity comes back, from the start of the run.
func (c *ovCapacity) returnAt() time.Duration { return c.LowStart + c.LowFor }

// fakellm is c as fakellm's capacity of model.
func (c *ovCapacity) fakellm(model string) fakellm.Capacity {
	return fakellm.Capacity{Model: model, InFlight: c.High, LatencyMs: c.LatencyMs, Changes: []fakellm.CapacityChange{
		{FromMs: c.LowStart.Milliseconds(), InFlight: c.Low},
		{FromMs: c.returnAt().Milliseconds(), InFlight: c.High},
	}}
}

// lowAllows is how many calls the model can answer in the low window: Low
// calls at a time, each taking twice LatencyMs (the model full), back to
// back for the whole window: the physical limit.
func (c *ovCapacity) lowAllows() float64 {
	if c.LatencyMs <= 0 {
		return 0
	}
	return float64(c.Low) * c.LowFor.Seconds() / (2 * float64(c.LatencyMs) / 1000)
}

// String describes the capacity in one line.
func (c *ovCapacity) String() string {
	return fmt.Sprintf("capacity %d calls in flight, %d from %v for %v, then %d again; a call takes %d ms alone, up to twice that as the model fills",
		c.High, c.Low, c.LowStart, c.LowFor, c.High, c.LatencyMs)
}

// overloadFigures are the overload scenario's own figures of a run:
// the overload answers (http_5xx_responses, and their share of the
// requests) and the prompts completed in the low window over what the
// capacity allowed there (goodput_vs_capacity).
func overloadFigures(f map[string]float64, c *ovCapacity, prompts []rlPrompt, stats fakellm.Stats) {
	var fivexx int64
	for status, n := range stats.ByStatus {
		if strings.HasPrefix(status, "5") {
			fivexx += n
		}
	}
	f["http_5xx_responses"], f["http_5xx_share"] = float64(fivexx), 0
	if stats.Total > 0 {
		f["http_5xx_share"] = float64(fivexx) / float64(stats.Total)
	}
	low := 0
	for _, p := range prompts {
		if p.ok && p.end >= c.LowStart && p.end < c.returnAt() {
			low++
		}
	}
	f["prompts_completed_low_window"] = float64(low)
	f["low_window_allows"] = c.lowAllows()
	if a := c.lowAllows(); a > 0 {
		f["goodput_vs_capacity"] = float64(low) / a
	}
}

// The overload scenario's contenders, and the system its targets are
// checked on.
const (
	ovPeer       = "peer"
	ovLimiterOff = "musepi-limiter-off"
	ovLimiterOn  = "musepi-limiter-on"
	// ovLimiterCluster is MusePi with the limiter on in cluster mode
	// (-nodes nodes, 3 by default), each node with its own limiter.
	ovLimiterCluster = "musepi-limiter-on-cluster"
)

// measureOverload runs the overload scenario's contenders in order and
// reports what they measured and the targets.
func measureOverload(ctx context.Context, o *options, command string, stderr io.Writer) (*Combined, error) {
	e, err := newRLEnv(o, stderr)
	if err != nil {
		return nil, err
	}
	e.sc.Capacity = &ovCapacity{High: o.capacity, Low: o.lowCapacity, LowStart: o.lowStart, LowFor: o.window, LatencyMs: ovLatencyMs}
	e.sc.Window = 0 // -window is the low window's length here, not a rate limit's
	defer func() {
		if e.db != nil {
			e.db.stop()
		}
	}()
	r := &Report{Command: command, Mode: o.mode, Sessions: o.sessions, GoVersion: runtime.Version(),
		CPUs: runtime.GOMAXPROCS(0), Started: time.Now(), Scenario: e.sc.String()}
	for _, c := range strings.Split(o.contenders, ",") {
		var s System
		switch c {
		case ovPeer:
			s, err = runRLPeer(ctx, e)
		case ovLimiterOff, ovLimiterOn:
			s, err = runOverloadMusePi(ctx, e, c == ovLimiterOn, 0)
		case ovLimiterCluster:
			if err = e.startDB(ctx); err == nil {
				s, err = runOverloadMusePi(ctx, e, true, e.nodes)
			}
		default:
			err = fmt.Errorf("unknown contender %q", c)
		}
		if err != nil {
			return nil, err
		}
		r.Systems = append(r.Systems, s)
	}
	r.Ratios = ovRatios(r.Systems)
	r.Targets = checkTargets("overload", r.Systems)
	r.Notes = ovNotes(e)
	r.Elapsed = time.Since(r.Started)
	return &Combined{Command: command, Mode: "overload", Started: r.Started, Runs: []*Report{r},
		Targets: r.Targets, Elapsed: r.Elapsed}, nil
}

// ovRatios compare each MusePi system with the peer on the overload
// figures.
func ovRatios(systems []System) []Ratio {
	i := slices.IndexFunc(systems, func(s System) bool { return s.Name == ovPeer })
	if i < 0 {
		return nil
	}
	var out []Ratio
	for _, m := range systems {
		if strings.HasPrefix(m.Name, "musepi") {
			out = ratiosTo(out, m, systems[i], []figureLabel{
				{"http_5xx_responses", "overload responses"},
				{"requests", "provider requests"},
				{"p99_prompt_latency_ms", "p99 prompt latency"},
				{"goodput_vs_capacity", "goodput vs the capacity in the low window"},
			})
		}
	}
	return out
}

// ovFiles are the outputs of an overload run: storm.md, storm.json and
// storm.svg.
func ovFiles(c *Combined) []outputFile {
	return []outputFile{
		{"storm.md", func(w io.Writer) error {
			return writeScenarioMarkdown(w, c, "Overload storm (the concurrency limiter)", ovRows)
		}},
		{"storm.json", func(w io.Writer) error { return writeJSON(w, c) }},
		{"storm.svg", func(w io.Writer) error { return writeSVG(w, c.Runs[0]) }},
	}
}

// ovRows are the rows of the overload run's figure table.
func ovRows([]System) []Figure { return ovFigureRows }

// ovFigureRows are the overload run's figures, in the table's order.
var ovFigureRows = []Figure{
	{"prompts_started", "prompts started", ""},
	{"prompts_completed", "prompts completed", ""},
	{"prompts_failed", "prompts failed (retries exhausted)", ""},
	{"prompts_lost", "prompts lost", ""},
	{"requests", "provider requests (fakellm's count)", ""},
	{"http_5xx_responses", "overload responses (fakellm's 5xx)", ""},
	{"http_5xx_share", "overload responses per request", ""},
	{"requests_per_prompt", "provider requests per completed prompt", ""},
	{"prompts_completed_low_window", "prompts completed in the low window", ""},
	{"low_window_allows", "what the capacity allows in the low window", ""},
	{"goodput_vs_capacity", "goodput vs the capacity in the low window", ""},
	{"p50_prompt_latency_ms", "prompt latency p50", "ms"},
	{"p99_prompt_latency_ms", "prompt latency p99", "ms"},
	{"p99_prompt_latency_ms_high", "prompt latency p99, high priority", "ms"},
	{"p99_prompt_latency_ms_low", "prompt latency p99, low priority", "ms"},
	{"p99_high_vs_low", "p99 high / p99 low", ""},
	{"limit_min", "the limiter's lowest limit", ""},
	{"limit_recovery_s", "from the capacity's return to the limit at 90 % of it", "s"},
	{"limit_sum_low_mean", "limit (summed over the nodes) in the settled low window, mean", ""},
	{"limit_sum_low_min", "limit (summed over the nodes) in the settled low window, lowest", ""},
	{"limit_sum_low_max", "limit (summed over the nodes) in the settled low window, highest", ""},
	{"limit_sum_in_band", "readings with the summed limit within 0.5-1.5× the low capacity", ""},
	{"limit_converged", "the limits converge (1: in the band in 90 % of the readings)", ""},
	{"limit_decreases_max", "decreases of one node's limit in the settled low window, most", ""},
	{"limit_node_mean_spread", "highest node's mean limit / lowest node's", ""},
	{"capacity_waits", "capacity_wait events", ""},
	{"run_minutes", "run, first prompt to last answer (to the stop when a prompt never ended)", "min"},
	{"cpu_seconds", "CPU time (the process: contender and fakellm)", "s"},
	{"wall_seconds", "wall time", "s"},
	{"setup_seconds", "setup before the first prompt (sessions created)", "s"},
}

// ovNotes explain the overload run's figures.
func ovNotes(e *rlEnv) []string {
	sc, c := e.sc, e.sc.Capacity
	return []string{
		fmt.Sprintf("sessions: %s, each sending %d prompts one after the other (the next when the one before is answered), each with the conversation before it; one key with no rate limit; %d %% of the sessions (%s) at high priority (musepi.High), the rest low (musepi.Low).",
			groupThousands(int64(sc.Sessions)), sc.Prompts, sc.HighPercent, everyNth(sc.HighPercent)),
		"fakellm (in this process, on loopback behind a counting front, a fresh server per contender, its clock reset as the first prompt goes) models the model's " + c.String() + ". A call beyond the capacity gets the overload answer at once (" + sc.wireText() + ": 503 on the OpenAI wire, 529 on Anthropic's), with no retry-after.",
		fmt.Sprintf("retries: the peer (cenkalti/backoff/v5) and MusePi retry each prompt up to %d times (base delay %v, backoff capped at 8 s); a prompt whose retries run out fails (prompts_failed); a prompt unfinished when -timeout (%v) stops a contender is lost.",
			e.settings.MaxRetries, e.settings.BaseDelay, e.timeout),
		"musepi-limiter-off: MusePi as today (each session backs off on its own); musepi-limiter-on: WithOverloadLimiter(overload.Settings{}), the defaults, untuned for this run. Pacing is off in both (no rate limit to pace).",
		"http_5xx_responses: fakellm's count of the responses with a 5xx status (stats by_status), the overload answers; http_5xx_share over its requests.",
		fmt.Sprintf("goodput_vs_capacity: the prompts completed (answered) within the low window [%v, %v) over what the capacity allows there, %d calls at a time each taking twice %d ms (the model full) for the whole window: %s. Prompts count by their answer's time, so calls the high capacity took just before the window and answered in it count too: up to %d more, which can put the ratio above 1.",
			c.LowStart, c.returnAt(), c.Low, c.LatencyMs, formatNumber(c.lowAllows()), c.High),
		"limit_recovery_s (the limiter on): the limiter's limit of the model, read every 100 ms with Runtime.ConcurrencyLimit, from the capacity's return to the first reading at 90 % of it or more; left out when the run ended (or stopped) before; limit_min is the lowest reading. The limit starts at overload.DefaultInitial (100) and grows by one an answer until the first overload answer.",
		"prompt latency: from the prompt sent to its answer, over the completed prompts; p50 and p99 are nearest-rank percentiles, also per priority.",
		fmt.Sprintf("musepi-limiter-on-cluster: %d nodes in this process sharing the one fakellm, as the ratelimit scenario's cluster (each a protoactor member with its gRPC remote on loopback, automanaged membership, its own connection pool to one PostgreSQL database); the session handles spread round robin over the nodes, the sessions hosted where the cluster places them; each node keeps its own limiter (cluster.Provider.Overload: the node's credentials router holds its turns' places), with the defaults, its models starting at overload.DefaultInitial shared among the members. Its targets are musepi-limiter-on's, and its overload responses at most 1.5× musepi-limiter-on's. No node leaves.", e.nodes),
		fmt.Sprintf("the limit over time (storm.json's limit_timeline, the limiter on): each node's limit (one runtime: one) read every %d ms with Runtime.ConcurrencyLimit, once every node has one. On a cluster limit_min and limit_recovery_s read the nodes' limits summed. Convergence, over the settled low window [%v, %v) (a sixth of the window after the drop, to the return): limit_sum_low_mean/min/max of the summed limit; limit_sum_in_band, the share of readings with it between %g× and %g× the low capacity (%d); limit_converged 1 when that share is %g or more; limit_decreases_node_N, each node's readings lower than the one before (several decreases within one period count once), limit_decreases_max the most of one node; limit_node_mean_spread, the highest node's mean limit over the lowest's (1: an even share).",
			limitPeriod.Milliseconds(), c.LowStart+c.LowFor/6, c.returnAt(), 1-limitBand, 1+limitBand, c.Low, convergedShare),
		"CPU time is the whole process's over the contender's run, fakellm's included (it serves in this process).",
	}
}
