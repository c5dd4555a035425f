package session

import (
	"fmt"
	"strings"
	"testing"
)

// The tests here are the retry policy's cases that share one shape, as
// tables: each runs a few inputs through a Core with the script harness of
// core_test.go and checks the effects of the inputs that matter, written
// as in testdata/*.txt. The behaviours with a story of their own are
// scripts in testdata/.

// started are the inputs of a prompt whose first turn streams.
var started = []string{"prompt hello", "credential main"}

// checkSteps runs the inputs of setup, then those of steps, a fragment in
// the form of testdata/*.txt ("> INPUT" lines, each followed by the
// effects it must return, then its state), and reports where the effects
// differ. It runs twice: straight through, and resuming the core from its
// record whenever it is at rest (as TestScriptsResumedAtRest does).
func checkSteps(t *testing.T, setup []string, steps string) {
	t.Helper()
	want := strings.TrimLeft(steps, "\n")
	for _, resume := range []bool{false, true} {
		sc := newScript(t, resume)
		for _, in := range setup {
			sc.input(in)
		}
		var out strings.Builder
		for _, line := range strings.Split(strings.TrimRight(want, "\n"), "\n") {
			if in, ok := strings.CutPrefix(line, "> "); ok {
				out.WriteString(line + "\n")
				for _, e := range sc.input(in) {
					out.WriteString(e + "\n")
				}
			}
		}
		if got := out.String(); got != want {
			t.Errorf("effects differ (resumed at rest: %t)\n%s\ngot:\n%s", resume, diff(want, got), got)
		}
	}
}

// with is setup followed by more inputs.
func with(setup []string, more ...string) []string {
	return append(append([]string(nil), setup...), more...)
}

// Spec 4, "Usage-limit waits", and "Decisions of our own": the reason of a
// usage limit with no hint is read from the provider's own words, never
// from the "429 Too Many Requests" status line the adapters put in front.
// A quota (or an unknown reason) waits 30 min: the key is blocked that
// long and, with no switch, the chain fails fast above maxDelayMs; the
// provider's own rate-limit words give 30 s. (retry.Chain's
// TestChainUsageLimit.)
func TestUsageLimitReasonFromProviderWords(t *testing.T) {
	for _, text := range []string{
		"429 Too Many Requests: You exceeded your current quota, please check your plan and billing details. (code: insufficient_quota, type: insufficient_quota)",
		"429 Too Many Requests: The usage limit has been reached (code: usage_limit_reached, type: usage_limit_reached)",
		"429 Too Many Requests: rate_limit_error: Claude AI usage limit reached for this period.",
	} {
		t.Run(text, func(t *testing.T) {
			failFast := fmt.Sprintf("provider asked for 1800000 ms, more than retry.maxDelayMs (300000 ms): %s", text)
			checkSteps(t, started, `
> turn-end error 429 `+text+`
emit message_end STOP_REASON_ERROR
ask-credential-switch fake/m1 block=30m0s
state deciding
> credential-reply none
emit agent_end willRetry=false
emit auto_retry_end success=false attempt=1 error="`+failFast+`"
emit agent_settled error="`+failFast+`"
settle gen=1 failed "`+failFast+`"
state idle
`)
		})
	}
	t.Run("the provider's own rate-limit words give 30 s", func(t *testing.T) {
		checkSteps(t, started, `
> turn-end error 429 429 Too Many Requests: usage limit: too many requests per minute
emit message_end STOP_REASON_ERROR
ask-credential-switch fake/m1 block=30s
state deciding
> credential-reply none
emit agent_end willRetry=true
emit auto_retry_start 1/10 delay=30s class=usage_limit
strip-trailing-error
arm-timer 30s then continue 1ms gen=1
state backoff
`)
	})
}

// Beyond the policy, the retry budget: the ask is due at the retry's
// backoff (or the provider's hint) and bounded by maxDelayMs after the
// decision ("never later than retry.maxDelayMs after the decision"), with
// no bound when the cap is off. A hint above maxDelayMs fails fast without
// asking. (retry.Chain's TestChainBudgetLatest and
// TestChainBudgetAsksBeforeTheRetry.)
func TestBudgetAskLatest(t *testing.T) {
	for _, tt := range []struct {
		name     string
		maxDelay string
		turnEnd  string
		ask      string
	}{
		{"default maxDelayMs bounds the hold", "5m", "error 503 503 Service Unavailable", "due=+500ms latest=+5m0s"},
		{"a smaller maxDelayMs", "10s", "error 503 503 Service Unavailable", "due=+500ms latest=+10s"},
		{"maxDelayMs 0: unbounded", "0", "error 503 503 Service Unavailable", "due=+500ms latest=none"},
		{"maxDelayMs negative: unbounded", "-1s", "error 503 503 Service Unavailable", "due=+500ms latest=none"},
		{"a provider hint is the due", "5m", "error 429 header:retry-after=3 429 Too Many Requests", "due=+3s latest=+5m0s"},
		{"a hint equal to maxDelayMs is still asked", "3s", "error 429 header:retry-after=3 429 Too Many Requests", "due=+3s latest=+3s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			setup := append([]string{"set budget=true showBudget=true maxDelay=" + tt.maxDelay}, started...)
			checkSteps(t, setup, `
> turn-end `+tt.turnEnd+`
emit message_end STOP_REASON_ERROR
report-outcome fake/m1 success=false
ask-budget fake/m1 `+tt.ask+`
state deciding
`)
		})
	}
	t.Run("a hint above maxDelayMs still fails fast, without asking", func(t *testing.T) {
		const failFast = "provider asked for 600000 ms, more than retry.maxDelayMs (300000 ms): 429 Too Many Requests"
		checkSteps(t, append([]string{"set budget=true showBudget=true"}, started...), `
> turn-end error 429 header:retry-after=600 429 Too Many Requests
emit message_end STOP_REASON_ERROR
emit agent_end willRetry=false
report-outcome fake/m1 success=false
emit auto_retry_end success=false attempt=1 error="`+failFast+`"
emit agent_settled error="`+failFast+`"
settle gen=1 failed "`+failFast+`"
state idle
`)
	})
	t.Run("with a jitter of 0.5 the due is the jittered backoff", func(t *testing.T) {
		checkSteps(t, append([]string{"set budget=true showBudget=true jitter=0.5"}, started...), `
> turn-end error 503 503 Service Unavailable
emit message_end STOP_REASON_ERROR
report-outcome fake/m1 success=false
ask-budget fake/m1 due=+437.5ms latest=+5m0s
state deciding
`)
	})
}

// Beyond the policy, the retry budget: the grant says when the retry goes
// out; never before its backoff (500 ms), and what comes after the
// backoff is the budget's part of auto_retry_start's delay. A second grant
// is out of phase; the chain ends as usual. (retry.Chain's
// TestChainBudgetGrant.)
func TestBudgetGrantInstant(t *testing.T) {
	for _, tt := range []struct {
		name, at, delay, budget string
	}{
		{"at due: the backoff alone", "+500ms", "500ms", "0s"},
		{"before due: never shortens the backoff", "+0s", "500ms", "0s"},
		{"later: the budget's extra is added", "+2500ms", "2.5s", "2s"},
		{"1 ns later", "+500000001ns", "500.000001ms", "1ns"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			setup := append([]string{"set budget=true showBudget=true"}, started...)
			setup = append(setup, "turn-end error 503 503 Service Unavailable")
			checkSteps(t, setup, `
> budget-grant `+tt.at+`
emit agent_end willRetry=true
emit auto_retry_start 1/10 delay=`+tt.delay+` class=transient budget=`+tt.budget+`
strip-trailing-error
arm-timer `+tt.delay+` then continue 1ms gen=1
state backoff
> budget-grant `+tt.at+` token=ask
state backoff
> backoff-done
emit agent_start gen=1
select-credential fake/m1 keep=main
state selecting_credential
> credential main
start-turn 2 fake/m1 credential=main
state streaming
> turn-end stop Hello!
emit message_end STOP_REASON_STOP
emit agent_end willRetry=false
report-outcome fake/m1 success=true
emit auto_retry_end success=true attempt=1
emit agent_settled success
settle gen=1 ok
state idle
`)
		})
	}
}

// Beyond the policy, the retry budget: which turn ends it counts.
// Successes and failures that load the provider are reported (a failure
// before the chain asks); a usage limit, a stale replay, a reason-less
// abort, a refusal, a non-retryable error, an overflow and a failure
// during a user abort are not, nor anything with auto-retry off. A stale
// replay is not held either: it retries at once. (retry.Chain's
// TestChainBudgetRecordsOutcomes.)
func TestBudgetRecordsOutcomes(t *testing.T) {
	budget := append([]string{"set budget=true showBudget=true"}, started...)
	for _, tt := range []struct {
		name  string
		setup []string
		steps string
	}{
		{"success with no chain open", budget, `
> turn-end stop Hello!
emit message_end STOP_REASON_STOP
emit agent_end willRetry=false
report-outcome fake/m1 success=true
emit agent_settled success
settle gen=1 ok
state idle
`},
		{"transient failure", budget, `
> turn-end error 529 overloaded_error
emit message_end STOP_REASON_ERROR
report-outcome fake/m1 success=false
ask-budget fake/m1 due=+500ms latest=+5m0s
state deciding
`},
		{"rate limit", budget, `
> turn-end error 429 429 Too Many Requests
emit message_end STOP_REASON_ERROR
report-outcome fake/m1 success=false
ask-budget fake/m1 due=+500ms latest=+5m0s
state deciding
`},
		{"not retryable", budget, `
> turn-end error 401 401 invalid x-api-key
emit message_end STOP_REASON_ERROR
emit agent_end willRetry=false
emit agent_settled error="401 invalid x-api-key"
settle gen=1 failed "401 invalid x-api-key"
state idle
`},
		{"context overflow", budget, `
> turn-end error 400 prompt is too long: 230500 tokens > 200000 maximum
emit message_end STOP_REASON_ERROR
emit agent_end willRetry=false
emit compaction_required "prompt is too long: 230500 tokens > 200000 maximum"
emit agent_settled error="prompt is too long: 230500 tokens > 200000 maximum"
settle gen=1 context_overflow "prompt is too long: 230500 tokens > 200000 maximum"
state idle
`},
		{"usage limit", budget, `
> turn-end error 429 You exceeded your current quota (insufficient_quota)
emit message_end STOP_REASON_ERROR
ask-credential-switch fake/m1 block=30m0s
state deciding
`},
		{"a retryable error during a user abort", with(budget, "abort"), `
> turn-end error 0 stream stalled: no data for 120s
emit message_end STOP_REASON_ERROR
emit agent_end willRetry=false
emit agent_settled error="prompt aborted"
settle gen=1 aborted "prompt aborted"
state idle
`},
		{"stale replay: not reported, not held", budget, `
> turn-end error 400 Item with id 'rs_1' not found.
emit message_end STOP_REASON_ERROR
emit agent_end willRetry=true
reset-provider-session fake/m1
emit auto_retry_start 1/10 delay=0s class=stale_replay budget=0s
strip-trailing-error
arm-timer 0s then continue 1ms gen=1
state backoff
`},
		{"reasonless abort: not reported, asked", budget, `
> turn-end aborted
emit message_end STOP_REASON_ABORTED
ask-budget fake/m1 due=+500ms latest=+5m0s
state deciding
`},
		{"classifier refusal (model fallback off)", budget, `
> turn-end refusal details:refusal I can't help with that.
emit message_end STOP_REASON_ERROR
emit agent_end willRetry=false
emit agent_settled error="I can't help with that."
settle gen=1 failed "I can't help with that."
state idle
`},
		{"retry disabled: success", append([]string{"set budget=true enabled=false"}, started...), `
> turn-end stop Hello!
emit message_end STOP_REASON_STOP
emit agent_end willRetry=false
emit agent_settled success
settle gen=1 ok
state idle
`},
		{"retry disabled: transient failure", append([]string{"set budget=true enabled=false"}, started...), `
> turn-end error 503 503 Service Unavailable
emit message_end STOP_REASON_ERROR
emit agent_end willRetry=false
emit agent_settled error="503 Service Unavailable"
settle gen=1 failed "503 Service Unavailable"
state idle
`},
		{"retry switched off by the session: transient failure", with(budget, "set-auto-retry false"), `
> turn-end error 503 503 Service Unavailable
emit message_end STOP_REASON_ERROR
emit agent_end willRetry=false
emit agent_settled error="503 Service Unavailable"
settle gen=1 failed "503 Service Unavailable"
state idle
`},
		{"max retries 0: the failure is reported, the chain ends", append([]string{"set budget=true maxRetries=0"}, started...), `
> turn-end error 503 503 Service Unavailable
emit message_end STOP_REASON_ERROR
emit agent_end willRetry=false
report-outcome fake/m1 success=false
emit auto_retry_end success=false attempt=0 error="503 Service Unavailable"
emit agent_settled error="503 Service Unavailable"
settle gen=1 failed "503 Service Unavailable"
state idle
`},
	} {
		t.Run(tt.name, func(t *testing.T) { checkSteps(t, tt.setup, tt.steps) })
	}
}

// Spec 4, "Edge cases": attempt numbers and the doubling never overflow:
// from attempt 5 on, and at attempt 64 and beyond, the backoff stays at the
// 8 s cap; with another baseDelayMs it doubles from there to the same cap.
// (retry.Chain's TestChainDefaultBackoffSequence, and
// TestChainAttemptNeverOverflows as far as a session reaches: the
// counter's saturation at 2^31-1 is the chain's own.)
func TestBackoffStaysCapped(t *testing.T) {
	for _, tt := range []struct {
		base     string
		attempts int
		delays   []string // of the first attempts; the cap after them
	}{
		{"500ms", 70, []string{"500ms", "1s", "2s", "4s"}},
		{"3s", 5, []string{"3s", "6s"}},
	} {
		t.Run("baseDelay="+tt.base, func(t *testing.T) {
			sc := newScript(t, false)
			sc.input("set credentials=none maxRetries=100 baseDelay=" + tt.base)
			sc.input("prompt hello")
			for attempt := 1; attempt <= tt.attempts; attempt++ {
				delay := "8s"
				if attempt <= len(tt.delays) {
					delay = tt.delays[attempt-1]
				}
				start := fmt.Sprintf("emit auto_retry_start %d/100 delay=%s class=transient", attempt, delay)
				arm := fmt.Sprintf("arm-timer %s then continue 1ms gen=1", delay)
				got := sc.input("turn-end error 503 503 Service Unavailable")
				if !contains(got, start) || !contains(got, arm) {
					t.Fatalf("attempt %d: effects %q, want %q and %q", attempt, got, start, arm)
				}
				sc.input("backoff-done")
			}
		})
	}
}

func contains(lines []string, line string) bool {
	for _, l := range lines {
		if l == line {
			return true
		}
	}
	return false
}
