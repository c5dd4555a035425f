package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/musepi/musepi/provider/fakellm"
)

// The ratelimit scenario (issue 28): sessions send several prompts one
// after the other, each on the context of the ones before, to a fake
// server whose two keys each allow RPM requests and TPM tokens a minute.
// Demand is far above what the keys allow for most of the run: every
// session has a prompt out from the start to its last answer. A fifth of
// the sessions are interactive (high priority), the rest background (low).

// rlModel is the model every session asks for: fakellm keeps its buckets
// per key and model, so one model makes one pair of buckets per key.
const rlModel = "m-ratelimit"

// rlAnswer is fakellm's answer to every prompt that goes through: 120
// bytes, 30 output tokens as fakellm counts them (bytes / 4).
var rlAnswer = strings.Repeat("All right, noted. ", 6) + "What's next?"

// rlSizes are the prompt sizes in tokens as fakellm counts them (bytes / 4
// of the request body): small, medium and large, dealt by rlSizeClass.
var rlSizes = [3]int{25, 150, 600}

// rlSizeClass deals prompt j of the session of rank r within its priority
// its size class: the pattern (3r + 7j) mod 10 gives 6 small, 3 medium and
// 1 large in every 10 sessions of a priority, for every j, so that each
// priority gets the same mix.
func rlSizeClass(r, j int) int {
	switch c := (3*r + 7*j) % 10; {
	case c < 6:
		return 0
	case c < 9:
		return 1
	}
	return 2
}

// rateLimitScenario is one ratelimit storm.
type rateLimitScenario struct {
	Sessions    int
	Prompts     int           // per session, one after the other
	Keys        []string      // the provider's keys, each with its own limits
	RPM, TPM    int64         // per key: requests and tokens per minute
	ITPM, OTPM  int64         // per key: Anthropic's input and output tokens per minute
	Window      time.Duration // fakellm enforces each per-minute limit over windows this long (0: the minute)
	HighPercent int           // share of the sessions at high priority; the rest are low
	MaxTokens   int64         // max_completion_tokens (Anthropic: max_tokens) of every request; 0: none
	Ramp        time.Duration
	Wire        string // the API: "openai" (Chat Completions) or "anthropic" (Messages)
	// Capacity, when set, is the model's capacity over time (the overload
	// scenario): the keys have no rate limits then.
	Capacity *ovCapacity
}

// rlKeys are the names (and the API keys) of n keys: key-a, key-b, ...
// (limitedKey and freeKey first).
func rlKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key-" + string(rune('a'+i))
	}
	return keys
}

// promptText is the text of session i's prompt j (from 0): a header
// naming them, then filler up to its size class's bytes (4 per token).
func (sc *rateLimitScenario) promptText(i, j int) string {
	head := "Session " + strconv.Itoa(i) + ", prompt " + strconv.Itoa(j+1) + ": "
	n := rlSizes[rlSizeClass(sc.rank(i), j)] * 4
	const filler = "lorem ipsum dolor sit amet "
	var b strings.Builder
	b.Grow(n)
	b.WriteString(head)
	for b.Len() < n {
		b.WriteString(filler[:min(len(filler), n-b.Len())])
	}
	return b.String()
}

// high reports whether session i is at high priority: HighPercent of
// every 100 sessions, spread evenly (session i is high when the count of
// high sessions steps up at i).
func (sc *rateLimitScenario) high(i int) bool {
	p := sc.HighPercent
	return (i+1)*p/100 > i*p/100
}

// rank is session i's place among the sessions of its priority (from 0).
func (sc *rateLimitScenario) rank(i int) int {
	highBefore := i * sc.HighPercent / 100
	if sc.high(i) {
		return highBefore
	}
	return i - highBefore
}

// keyOf is the key session i starts on: round robin over the keys.
func (sc *rateLimitScenario) keyOf(i int) string { return sc.Keys[i%len(sc.Keys)] }

// startAt is when session i sends its first prompt: at once, or spread
// evenly over the ramp.
func (sc *rateLimitScenario) startAt(i int) time.Duration {
	if sc.Ramp <= 0 || sc.Sessions <= 1 {
		return 0
	}
	return time.Duration(int64(sc.Ramp) / int64(sc.Sessions) * int64(i))
}

// totalPrompts is how many prompts the run sends.
func (sc *rateLimitScenario) totalPrompts() int { return sc.Sessions * sc.Prompts }

// fakellm is the fake server's scenario: every key of sc limited to RPM,
// TPM, ITPM and OTPM over the window, every answer rlAnswer; any other key
// is refused.
func (sc *rateLimitScenario) fakellm() *fakellm.Scenario {
	out := &fakellm.Scenario{Default: &fakellm.Respond{Preset: "auth"}}
	if sc.Capacity != nil {
		out.Capacity = []fakellm.Capacity{sc.Capacity.fakellm(rlModel)}
	}
	for _, k := range sc.Keys {
		out.Rules = append(out.Rules, fakellm.Rule{Name: k, Match: fakellm.Match{Key: k},
			Respond: fakellm.Respond{Text: rlAnswer, Chunks: 1}})
		if sc.Capacity != nil {
			continue
		}
		out.Limits = append(out.Limits, fakellm.Limit{Key: k, RPM: sc.RPM, TPM: sc.TPM, ITPM: sc.ITPM, OTPM: sc.OTPM,
			WindowMs: sc.Window.Milliseconds()})
	}
	return out
}

// String describes the scenario in one line.
func (sc *rateLimitScenario) String() string {
	if sc.Capacity != nil {
		return fmt.Sprintf("overload: %s sessions × %d prompts one after the other (each on the context of the ones before; answers %d tokens), one key with no rate limit, the model's %s, %d %% of the sessions at high priority, the rest low, %s",
			groupThousands(int64(sc.Sessions)), sc.Prompts, len(rlAnswer)/4, sc.Capacity, sc.HighPercent, sc.wireText())
	}
	s := fmt.Sprintf("ratelimit: %s sessions × %d prompts one after the other (sizes %d/%d/%d tokens, 6:3:1, each on the context of the ones before; answers %d tokens; %s), %d keys × %s, %d %% of the sessions at high priority, the rest low, %s",
		groupThousands(int64(sc.Sessions)), sc.Prompts, rlSizes[0], rlSizes[1], rlSizes[2], len(rlAnswer)/4, sc.maxTokensText(),
		len(sc.Keys), sc.limitsText(), sc.HighPercent, sc.wireText())
	if sc.Ramp > 0 {
		s += fmt.Sprintf(", sessions start spread over %v", sc.Ramp)
	}
	return s
}

// limitsText describes a key's limits: "600 requests/min and 200,000
// tokens/min", each kind set, and the window when there is one.
func (sc *rateLimitScenario) limitsText() string {
	var parts []string
	for _, l := range []struct {
		n    int64
		unit string
	}{{sc.RPM, "requests/min"}, {sc.TPM, "tokens/min"}, {sc.ITPM, "input tokens/min"}, {sc.OTPM, "output tokens/min"}} {
		if l.n > 0 {
			parts = append(parts, groupThousands(l.n)+" "+l.unit)
		}
	}
	s := strings.Join(parts, ", ")
	if i := strings.LastIndex(s, ", "); i >= 0 {
		s = s[:i] + " and " + s[i+2:]
	}
	if sc.Window > 0 && sc.Window < time.Minute {
		s += fmt.Sprintf(" (enforced over %v windows)", sc.Window)
	}
	return s
}

// maxTokensText describes the requests' output limit.
func (sc *rateLimitScenario) maxTokensText() string {
	if sc.MaxTokens == 0 {
		return "no max_tokens"
	}
	return fmt.Sprintf("max_tokens %d", sc.MaxTokens)
}

// wireText names the API the run speaks and the SDK that speaks it.
func (sc *rateLimitScenario) wireText() string {
	if sc.Wire == "anthropic" {
		return "the Anthropic Messages API (anthropic-sdk-go)"
	}
	return "the OpenAI Chat Completions API (openai-go)"
}

// rlCost is what a completed prompt took, on average, from each of the
// keys' token limits as fakellm charges them.
type rlCost struct {
	tokens float64 // TPM: charged (rateLimitScenario.charged)
	input  float64 // Anthropic's ITPM: the input (body bytes / 4)
	output float64 // Anthropic's OTPM: the output (the unused max_tokens given back)
}

// charged is what a prompt answered with input and output tokens took
// from its key's TPM: OpenAI keeps the max_tokens it reserved at
// admission (and takes output beyond them too), Anthropic gives back what
// the answer did not use.
func (sc *rateLimitScenario) charged(input, output int64) int64 {
	if sc.Wire == "anthropic" {
		return input + output
	}
	return input + max(sc.MaxTokens, output)
}

// limitPerMinute is what the keys allow in sustained prompts per minute
// when a prompt costs c: each key the least of RPM, TPM / c.tokens, ITPM /
// c.input and OTPM / c.output, summed over the keys. A limit of 0, or a
// cost of 0, does not constrain; 0 when nothing does.
func (sc *rateLimitScenario) limitPerMinute(c rlCost) float64 {
	per := math.Inf(1)
	for _, l := range []struct {
		perMinute int64
		cost      float64
	}{{sc.RPM, 1}, {sc.TPM, c.tokens}, {sc.ITPM, c.input}, {sc.OTPM, c.output}} {
		if l.perMinute > 0 && l.cost > 0 {
			per = min(per, float64(l.perMinute)/l.cost)
		}
	}
	if math.IsInf(per, 1) {
		return 0
	}
	return float64(len(sc.Keys)) * per
}

// burstMinutes is how many minutes of their limits the keys' buckets hold
// at once: 1, or with a window shorter than the minute the window's share
// of it.
func (sc *rateLimitScenario) burstMinutes() float64 {
	if sc.Window <= 0 || sc.Window >= time.Minute {
		return 1
	}
	return sc.Window.Minutes()
}

// goodputVsLimit is completed prompts per minute over the physical limit
// for a run of minutes: the keys' buckets start full (burst minutes'
// worth: 1, or a window's share of the minute) and refill at their
// per-minute rate, so in a run of D minutes they allow at most (burst +
// D) × perMinute prompts; the ratio is completed over that (1.0: every
// prompt the limits allowed went through). 0 when nothing is allowed or
// the run took no time.
func goodputVsLimit(completed int, minutes, perMinute, burst float64) float64 {
	allowed := (burst + minutes) * perMinute
	if allowed <= 0 || minutes <= 0 {
		return 0
	}
	return float64(completed) / allowed
}
