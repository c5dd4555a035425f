package main

import (
	"fmt"
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
	Prompts     int      // per session, one after the other
	Keys        []string // the provider's keys, each with its own limits
	RPM, TPM    int64    // per key: requests and tokens per minute
	HighPercent int      // share of the sessions at high priority; the rest are low
	MaxTokens   int64    // max_completion_tokens (Anthropic: max_tokens) of every request; 0: none
	Ramp        time.Duration
	Wire        string // the API: "openai" (Chat Completions) or "anthropic" (Messages)
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

// fakellm is the fake server's scenario: every key of sc limited to RPM
// and TPM, every answer rlAnswer; any other key is refused.
func (sc *rateLimitScenario) fakellm() *fakellm.Scenario {
	out := &fakellm.Scenario{Default: &fakellm.Respond{Preset: "auth"}}
	for _, k := range sc.Keys {
		out.Limits = append(out.Limits, fakellm.Limit{Key: k, RPM: sc.RPM, TPM: sc.TPM})
		out.Rules = append(out.Rules, fakellm.Rule{Name: k, Match: fakellm.Match{Key: k},
			Respond: fakellm.Respond{Text: rlAnswer, Chunks: 1}})
	}
	return out
}

// String describes the scenario in one line.
func (sc *rateLimitScenario) String() string {
	s := fmt.Sprintf("ratelimit: %s sessions × %d prompts one after the other (sizes %d/%d/%d tokens, 6:3:1, each on the context of the ones before; answers %d tokens; %s), %d keys × %s requests/min and %s tokens/min, %d %% of the sessions at high priority, the rest low, %s",
		groupThousands(int64(sc.Sessions)), sc.Prompts, rlSizes[0], rlSizes[1], rlSizes[2], len(rlAnswer)/4, sc.maxTokensText(),
		len(sc.Keys), groupThousands(sc.RPM), groupThousands(sc.TPM), sc.HighPercent, sc.wireText())
	if sc.Ramp > 0 {
		s += fmt.Sprintf(", sessions start spread over %v", sc.Ramp)
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

// limitPerMinute is what the keys allow in sustained prompts per minute
// when a prompt costs meanTokens tokens: each key min(RPM, TPM /
// meanTokens), summed over the keys. A limit of 0 does not constrain.
func limitPerMinute(keys int, rpm, tpm int64, meanTokens float64) float64 {
	per := float64(rpm)
	if tpm > 0 && meanTokens > 0 {
		byTokens := float64(tpm) / meanTokens
		if rpm <= 0 || byTokens < per {
			per = byTokens
		}
	}
	return float64(keys) * per
}

// goodputVsLimit is completed prompts per minute over the physical limit
// for a run of minutes: the keys' buckets start full (a minute's worth)
// and refill at their per-minute rate, so in a run of D minutes they
// allow at most (1 + D) × limitPerMinute prompts; the ratio is completed
// over that (1.0: every prompt the limits allowed went through). 0 when
// nothing is allowed or the run took no time.
func goodputVsLimit(completed int, minutes, perMinute float64) float64 {
	allowed := (1 + minutes) * perMinute
	if allowed <= 0 || minutes <= 0 {
		return 0
	}
	return float64(completed) / allowed
}
