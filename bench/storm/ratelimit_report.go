package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// rlFigureRows are the ratelimit scenario's figures, in table order.
var rlFigureRows = []Figure{
	{"prompts_started", "prompts started", ""},
	{"prompts_completed", "prompts completed", ""},
	{"prompts_failed", "prompts failed", ""},
	{"prompts_lost", "prompts lost", ""},
	{"requests", "provider requests (fakellm's count)", ""},
	{"http_429_responses", "429 responses (fakellm's count)", ""},
	{"http_429_share", "429 responses per request", ""},
	{"http_429_requests_limit", "429s of the requests limit", ""},
	{"http_429_tokens_limit", "429s of the tokens limit", ""},
	{"http_429_input_tokens_limit", "429s of the input tokens limit", ""},
	{"http_429_output_tokens_limit", "429s of the output tokens limit", ""},
	{"requests_per_prompt", "provider requests per completed prompt", ""},
	{"goodput_vs_limit", "goodput vs the limit (completed over what the limits allowed)", ""},
	{"prompts_per_minute", "completed prompts per minute", ""},
	{"limit_prompts_per_minute", "the keys' limit at that cost, prompts per minute", ""},
	{"tokens_per_prompt", "tokens fakellm charged per completed prompt", ""},
	{"input_tokens_per_prompt", "input tokens per completed prompt", ""},
	{"output_tokens_per_prompt", "output tokens per completed prompt", ""},
	{"run_minutes", "run, first prompt to last answer (to the stop when a prompt never ended)", "min"},
	{"p50_prompt_latency_ms", "prompt latency p50", "ms"},
	{"p99_prompt_latency_ms", "prompt latency p99", "ms"},
	{"p99_prompt_latency_ms_high", "prompt latency p99, high priority", "ms"},
	{"p99_prompt_latency_ms_low", "prompt latency p99, low priority", "ms"},
	{"p99_high_vs_low", "p99 high / p99 low", ""},
	{"jain_fairness", "Jain's fairness index (the lower of the priorities')", ""},
	{"jain_fairness_high", "Jain's fairness index, high priority", ""},
	{"jain_fairness_low", "Jain's fairness index, low priority", ""},
	{"max_key_idle_s", "longest a key admitted nothing while turns waited for it (the keys' longest)", "s"},
	{"max_admissions_per_second", "most requests a key admitted in one second (the keys' most)", ""},
	{"stayed_on_key_share", "turns on their session's previous key (share of the turns after a turn)", ""},
	{"turns_with_a_previous_turn", "turns after a turn of their session", ""},
	{"rate_limit_waits", "rate_limit_wait events", ""},
	{"credential_switches_pacing", "credential switches for pacing", ""},
	{"requests_sent_harness", "provider requests (the harness's count)", ""},
	{"http_429_responses_harness", "429 responses (the harness's count)", ""},
	{"cpu_seconds", "CPU time (the process: contender and fakellm)", "s"},
	{"wall_seconds", "wall time", "s"},
	{"setup_seconds", "setup before the first prompt (sessions created)", "s"},
}

// rlPerKey are the figures reported per key too: each key's under the
// figure's key with "_<key>" added, labelled with the key's name.
var rlPerKey = map[string]string{
	"max_key_idle_s":            "longest %s admitted nothing while turns waited for it",
	"max_admissions_per_second": "most requests %s admitted in one second",
}

// rlRows are rlFigureRows with, after each figure of rlPerKey, a row per
// key that some system reports it for.
func rlRows(systems []System) []Figure {
	var rows []Figure
	for _, f := range rlFigureRows {
		rows = append(rows, f)
		label, ok := rlPerKey[f.Key]
		if !ok {
			continue
		}
		keys := map[string]bool{}
		for _, s := range systems {
			for k := range s.Figures {
				if key, found := strings.CutPrefix(k, f.Key+"_"); found {
					keys[key] = true
				}
			}
		}
		for _, key := range slices.Sorted(maps.Keys(keys)) {
			rows = append(rows, Figure{f.Key + "_" + key, fmt.Sprintf(label, key), f.Unit})
		}
	}
	return rows
}

// writeScenarioMarkdown renders a ratelimit or overload run as a
// Markdown document titled title: a header block, the figure table (a row
// per figure of rows, a column per contender), the ratios to the peer,
// the targets and the notes.
func writeScenarioMarkdown(w io.Writer, c *Combined, title string, rows func([]System) []Figure) error {
	var b bytes.Buffer
	b.WriteString("# " + title + "\n\n")
	fmt.Fprintf(&b, "- Command: %s\n", codeSpan(c.Command))
	for _, r := range c.Runs {
		fmt.Fprintf(&b, "- Mode: %s\n", r.Mode)
		fmt.Fprintf(&b, "- Go: %s, CPUs: %d\n", r.GoVersion, r.CPUs)
		fmt.Fprintf(&b, "- Scenario: %s\n", r.Scenario)
		fmt.Fprintf(&b, "- Elapsed: %s s\n\n", formatNumber(r.Elapsed.Seconds()))
		writeFigureTable(&b, r.Systems, rows(r.Systems))
		if len(r.Ratios) > 0 {
			b.WriteString("\n## Ratios\n\n| Ratio | Value |\n|---|--:|\n")
			for _, q := range r.Ratios {
				fmt.Fprintf(&b, "| %s | %s× |\n", mdCell(q.Label), formatRatio(q.Value))
			}
		}
	}
	writeTargets(&b, c.Targets, "##")
	for _, r := range c.Runs {
		writeNotes(&b, r, "##")
	}
	_, err := w.Write(b.Bytes())
	return err
}

// rlFiles are the outputs of a ratelimit run: storm.md, storm.json (runs:
// its one report; targets) and storm.svg.
func rlFiles(c *Combined) []outputFile {
	return []outputFile{
		{"storm.md", func(w io.Writer) error { return writeScenarioMarkdown(w, c, "Rate-limit storm (pacing)", rlRows) }},
		{"storm.json", func(w io.Writer) error { return writeJSON(w, c) }},
		{"storm.svg", func(w io.Writer) error { return writeSVG(w, c.Runs[0]) }},
	}
}

// rlNotes explain the ratelimit run's figures.
func rlNotes(e *rlEnv) []string {
	sc := e.sc
	n := []string{
		fmt.Sprintf("sessions: %s, each sending %d prompts one after the other (the next when the one before is answered), each prompt with the conversation before it (its prompts and answers) as a chat client sends it; %d keys (%s), the peer's session i on key i mod %d throughout; %d %% of the sessions (%s) are at high priority, the rest low.",
			groupThousands(int64(sc.Sessions)), sc.Prompts, len(sc.Keys), strings.Join(sc.Keys, ", "), len(sc.Keys), sc.HighPercent, everyNth(sc.HighPercent)),
		fmt.Sprintf("prompt sizes: %d, %d or %d tokens of text (fakellm counts bytes / 4), dealt 6:3:1 within each priority; every answer is %d tokens; %s on every request. A prompt's request also carries the conversation before it, so its cost grows with its place in the session.",
			rlSizes[0], rlSizes[1], rlSizes[2], len(rlAnswer)/4, sc.maxTokensText()),
		"fakellm (in this process, on loopback behind a counting front, a fresh server per contender: buckets full at its start) limits each key to " + sc.limitsText() + ", by the provider's published rules: " + sc.costText() + " Every answer carries the provider's rate-limit headers.",
		"requests and 429 responses are fakellm's counts (stats total and by_status 429; the harness's own counts are in the table too). The contenders speak " + sc.wireText() + " through MusePi's adapter of it (the SDK's own retries off).",
		"goodput_vs_limit = C / ((B + D) × L): C the prompts completed, D the minutes from the first prompt sent to the last answer (to the stop, when a prompt never ended: the keys could have answered it), L = Σ over the keys of min(RPM, TPM / c̄, ITPM / c̄in, OTPM / c̄out) (the limits set) the prompts per minute the keys sustain when a prompt costs what fakellm charged the completed prompts on average: c̄ from the tokens limit (OpenAI: input + max(max_tokens, output), max_tokens kept; Anthropic: input + output, the unused max_tokens given back), c̄in the input (body bytes / 4), c̄out the output, as their answers' usage reports them (tokens_per_prompt, input_tokens_per_prompt, output_tokens_per_prompt). The buckets start full (B minutes' worth: 1, or with -window the window's share of the minute) and refill at their rate, so no client completes more than (B + D) × L prompts in D minutes: 1.0 is the physical limit.",
		"prompt latency: from the prompt sent (PromptAsync, or the peer's first try) to its answer, over the completed prompts; p50 and p99 are nearest-rank percentiles, also per priority. Jain's index per priority is (Σx)² / (n Σx²) over that priority's sessions, x a session's mean prompt latency; jain_fairness is the lower of the two.",
		fmt.Sprintf("retries: the peer and MusePi retry each prompt up to %d times (base delay %v); a 429 is retried, honouring retry-after (the peer through backoff.RetryAfter, in whole seconds; MusePi takes the longer of its backoff and the hint).",
			e.settings.MaxRetries, e.settings.BaseDelay),
		"musepi-pacing-on: " + e.limitsSource() + "; musepi-pacing-off: WithPacing(false), the retry policy alone. Both give high-priority sessions musepi.High and the others musepi.Low (only pacing orders by it).",
		"-pacing-limits: configured (the default) gives MusePi with pacing on the keys' limits (Credential.RateLimits, corrected by the headers); headers makes it learn them from the responses only, a cold start when every session sends its first prompt at once (without -ramp): no response has told a limit yet.",
		"CPU time is the whole process's over the contender's run, fakellm's included (it serves in this process).",
	}
	return append(n, rlKeyNotes...)
}

// rlKeyNotes define the per-key figures (issue 37).
var rlKeyNotes = []string{
	"max_key_idle_s: for each key, the longest stretch during which the key admitted nothing (no request reached fakellm on it, as its counting front saw them arrive, but to be refused with a 429) while at least one turn waited for it; the figure is the longest over the keys, and each key's is given (max_key_idle_s_<key>). A turn waits for a key: for musepi-pacing-on, from its rate_limit_wait event naming the key (musepi.RateLimitWait, at the event's time) to its session's next request (the grant), or to a rate_limit_wait naming another key; for the peer and musepi-pacing-off (which do not pace), while a prompt is not yet answered, for the key of its latest request, from that request on. Waits still open when the run ends end there.",
	"max_admissions_per_second: for each key, the most requests it admitted (reached fakellm and were not refused with a 429, by their arrival at the front) within any one second [t, t + 1 s); the most over the keys, and each key's (max_admissions_per_second_<key>).",
	"stayed_on_key_share: of the requests (turns, retries included) of a session that had sent one before (turns_with_a_previous_turn), the share sent on the same API key as the session's request just before it, the key read from the request the adapter sent (the API key fakellm sees). It counts every turn, whether or not its previous key had room: a turn moved off a key with no room counts as not staying.",
}

// costText is what a request costs at fakellm in sc's API, refused or
// not, and over which window.
func (sc *rateLimitScenario) costText() string {
	s := "a request takes 1 request and, from the tokens limit, its body's bytes / 4 plus max_tokens at its admission, and keeps them (OpenAI gives no unused max_tokens back; output beyond them is taken too, and without max_tokens the answer's output); a request that does not fit gets a 429 with retry-after (whole seconds) and retry-after-ms, and still takes its 1 request (OpenAI: unsuccessful requests count)."
	if sc.Wire == "anthropic" {
		s = "a request takes 1 request, its body's bytes / 4 from the input tokens limit, max_tokens from the output tokens limit (the part the answer did not use given back at its end) and both from a total tokens limit if set; a request that does not fit gets a 429 with retry-after (whole seconds) and takes nothing."
	}
	if sc.Window > 0 && sc.Window < time.Minute {
		s += fmt.Sprintf(" Each per-minute limit L is enforced over %v windows: a bucket holds at most L × %v / 1 min, refilled at L a minute.", sc.Window, sc.Window)
	}
	return s
}

// everyNth describes how often a share of percent comes round: "one in
// 5" for 20 %.
func everyNth(percent int) string {
	if percent <= 0 {
		return "none"
	}
	if 100%percent == 0 {
		return fmt.Sprintf("one in %d", 100/percent)
	}
	return fmt.Sprintf("%d in 100", percent)
}
