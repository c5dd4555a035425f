package retry

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
)

// budgetScript is a script for a chain with the retry budget on: it renders
// report_outcome, ask_budget and the budget part of auto_retry_start, and
// fills in the token of budget grants and releases.
type budgetScript struct {
	*script
	ask uint64 // the token of the last ask_budget
}

// newBudgetScript: defaults with the budget on and model fallback off,
// jitter from src.
func newBudgetScript(t *testing.T, src Source, mutate ...func(*Settings)) *budgetScript {
	t.Helper()
	s := DefaultSettings()
	s.ModelFallback = false
	s.Budget.Enabled = true
	for _, m := range mutate {
		m(&s)
	}
	return &budgetScript{script: &script{t: t, c: NewChain(src), settings: s, now: t0, gen: 1}}
}

// step is script.step; a grant or release with no Token gets the last ask's.
func (sc *budgetScript) step(in Input, want ...string) {
	sc.t.Helper()
	in.Now = sc.now
	switch in.Kind {
	case InputTurnEnded:
		in.Settings = sc.settings
		in.Generation = sc.gen
	case InputCredentialReply, InputFallbackReply, InputSleepDone:
		in.Token = sc.token
	case InputBudgetGrant, InputBudgetRelease:
		if in.Token == 0 {
			in.Token = sc.ask
		}
	}
	got := sc.render(sc.c.Step(in))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		sc.t.Fatalf("effects:\n  got:  %s\n  want: %s", strings.Join(got, "\n        "), strings.Join(want, "\n        "))
	}
}

// render renders times relative to sc.now ("+437.5ms").
func (sc *budgetScript) render(effects []Effect) []string {
	sc.t.Helper()
	out := make([]string, 0, len(effects))
	for _, e := range effects {
		switch e.Kind {
		case ReportOutcome:
			out = append(out, fmt.Sprintf("report_outcome success=%t", e.Success))
		case AskBudget:
			latest := "none"
			if !e.Latest.IsZero() {
				latest = "+" + e.Latest.Sub(sc.now).String()
			}
			out = append(out, fmt.Sprintf("ask_budget due=+%s latest=%s", e.Due.Sub(sc.now), latest))
			sc.ask = e.Token
		case EmitStart:
			out = append(out, fmt.Sprintf("auto_retry_start %d/%d delay=%s budget=%s class=%s",
				e.Start.Attempt, e.Start.MaxAttempts, e.Start.Delay, e.Start.BudgetDelay, e.Start.Class))
		case CancelSleep:
			if e.Token != sc.token {
				sc.t.Errorf("cancel_sleep token %d, want %d (the running sleep's)", e.Token, sc.token)
			}
			out = append(out, "cancel_sleep")
		default:
			out = append(out, sc.script.render([]Effect{e})...)
		}
	}
	return out
}

func grant(at time.Time) Input   { return Input{Kind: InputBudgetGrant, At: at} }
func release(at time.Time) Input { return Input{Kind: InputBudgetRelease, At: at} }

// halfJitter is the fixed jitter of the budget chain tests: 87.5 % of nominal.
const halfJitter = fixedSource(0.5)

// backoff is the expected local backoff of attempt with the default base.
func backoff(attempt int) time.Duration {
	return Backoff(attempt, 500*time.Millisecond, float64(halfJitter))
}

func startLine(attempt int, delay, budget time.Duration) string {
	return fmt.Sprintf("auto_retry_start %d/10 delay=%s budget=%s class=transient", attempt, delay, budget)
}

// askLine is the ask of a retry due after delay, bounded by the default maxDelayMs.
func askLine(delay time.Duration) string {
	return fmt.Sprintf("ask_budget due=+%s latest=+5m0s", delay)
}

// A retryable turn end asks the budget before anything starts: the failure
// is recorded, the lifecycle opens, and no auto_retry_start is emitted yet.
func TestChainBudgetAsksBeforeTheRetry(t *testing.T) {
	if b := backoff(1); b != 437500*time.Microsecond {
		t.Fatalf("backoff(1) = %s; the expected lines below assume 437.5ms", b)
	}
	sc := newBudgetScript(t, halfJitter)
	sc.step(fail(unavailable, 503),
		"report_outcome success=false",
		"open_lifecycle",
		askLine(backoff(1)))
	if sc.c.Phase() != AwaitingBudget || !sc.c.IsRetrying() || sc.c.Attempt() != 1 {
		t.Fatalf("phase=%s retrying=%t attempt=%d; want awaiting_budget, true, 1", sc.c.Phase(), sc.c.IsRetrying(), sc.c.Attempt())
	}
	if AwaitingBudget.String() != "awaiting_budget" || ReportOutcome.String() != "report_outcome" || AskBudget.String() != "ask_budget" {
		t.Errorf("names: %s, %s, %s", AwaitingBudget, ReportOutcome, AskBudget)
	}

	t.Run("the ask carries exact times and the chain's token", func(t *testing.T) {
		c := NewChain(halfJitter)
		s := DefaultSettingsNoFallback()
		s.Budget.Enabled = true
		eff := c.Step(TurnEnded(t0, s, errorMsg(unavailable, 503), AbortState{}, 1))
		last := eff[len(eff)-1]
		if last.Kind != AskBudget || !last.Due.Equal(t0.Add(backoff(1))) || !last.Latest.Equal(t0.Add(5*time.Minute)) || last.Token != c.token {
			t.Fatalf("last effect %+v; want ask_budget due t0+%s latest t0+5m token %d", last, backoff(1), c.token)
		}
	})
}

func TestChainBudgetLatest(t *testing.T) {
	tests := []struct {
		name     string
		maxDelay time.Duration
		msg      Input
		want     string
	}{
		{"default maxDelayMs bounds the hold", 5 * time.Minute, fail(unavailable, 503), askLine(backoff(1))},
		{"a smaller maxDelayMs", 10 * time.Second, fail(unavailable, 503), fmt.Sprintf("ask_budget due=+%s latest=+10s", backoff(1))},
		{"maxDelayMs 0: unbounded", 0, fail(unavailable, 503), fmt.Sprintf("ask_budget due=+%s latest=none", backoff(1))},
		{"maxDelayMs negative: unbounded", -time.Second, fail(unavailable, 503), fmt.Sprintf("ask_budget due=+%s latest=none", backoff(1))},
		{"a provider hint is the due", 5 * time.Minute, fail("429 Too Many Requests", 429, "retry-after", "3"), "ask_budget due=+3s latest=+5m0s"},
		{"a hint equal to maxDelayMs is still asked", 3 * time.Second, fail("429 Too Many Requests", 429, "retry-after", "3"), "ask_budget due=+3s latest=+3s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := newBudgetScript(t, halfJitter, func(s *Settings) { s.MaxDelay = tt.maxDelay })
			sc.step(tt.msg, "report_outcome success=false", "open_lifecycle", tt.want)
		})
	}
	t.Run("a hint above maxDelayMs still fails fast, without asking", func(t *testing.T) {
		sc := newBudgetScript(t, halfJitter)
		sc.step(fail("429 Too Many Requests", 429, "retry-after", "600"),
			"report_outcome success=false",
			"open_lifecycle",
			`auto_retry_end success=false attempt=1 error="provider asked for 600000 ms, more than retry.maxDelayMs (300000 ms): 429 Too Many Requests"`,
			"close_lifecycle")
	})
}

func TestChainBudgetGrant(t *testing.T) {
	b1 := backoff(1)
	tests := []struct {
		name  string
		at    time.Time
		delay time.Duration // total sleep
		extra time.Duration // the budget's part
	}{
		{"at due: the backoff alone", t0.Add(b1), b1, 0},
		{"before due: never shortens the backoff", t0, b1, 0},
		{"later: the budget's extra is added", t0.Add(b1 + 2*time.Second), b1 + 2*time.Second, 2 * time.Second},
		{"1 ns later", t0.Add(b1 + 1), b1 + 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := newBudgetScript(t, halfJitter)
			sc.step(fail(unavailable, 503), "report_outcome success=false", "open_lifecycle", askLine(b1))
			sc.step(grant(tt.at),
				startLine(1, tt.delay, tt.extra),
				"strip_trailing_error",
				"sleep "+tt.delay.String())
			if sc.c.Phase() != Sleeping {
				t.Fatalf("phase %s, want sleeping", sc.c.Phase())
			}
			sc.step(grant(tt.at)) // a second grant is out of phase
			sc.step(sleepDone, "schedule_continue 1ms gen=1")
			sc.step(ok(),
				"report_outcome success=true",
				"auto_retry_end success=true attempt=1",
				"close_lifecycle")
		})
	}

	t.Run("a stale grant is ignored", func(t *testing.T) {
		sc := newBudgetScript(t, halfJitter)
		sc.step(fail(unavailable, 503), "report_outcome success=false", "open_lifecycle", askLine(b1))
		stale := grant(t0)
		stale.Token = sc.ask + 1
		sc.step(stale)
		stale.Token = sc.ask + 100
		sc.step(stale)
		if sc.c.Phase() != AwaitingBudget {
			t.Fatalf("phase %s after stale grants, want awaiting_budget", sc.c.Phase())
		}
		sc.step(grant(t0.Add(b1)), startLine(1, b1, 0), "strip_trailing_error", "sleep "+b1.String())
	})
	t.Run("a grant with no chain is ignored", func(t *testing.T) {
		sc := newBudgetScript(t, halfJitter)
		sc.step(grant(t0))
		sc.step(release(t0))
	})
	t.Run("the next attempt asks again with its own backoff", func(t *testing.T) {
		sc := newBudgetScript(t, halfJitter)
		sc.step(fail(unavailable, 503), "report_outcome success=false", "open_lifecycle", askLine(b1))
		first := sc.ask
		sc.step(grant(t0.Add(b1)), startLine(1, b1, 0), "strip_trailing_error", "sleep "+b1.String())
		sc.step(sleepDone, "schedule_continue 1ms gen=1")
		sc.now = sc.now.Add(time.Second)
		sc.step(fail(unavailable, 503), "report_outcome success=false", askLine(backoff(2)))
		if sc.ask == first {
			t.Fatalf("the second ask reuses token %d", first)
		}
		old := grant(sc.now)
		old.Token = first
		sc.step(old) // the first attempt's grant, if it came again
		sc.step(grant(sc.now.Add(backoff(2)+time.Second)),
			startLine(2, backoff(2)+time.Second, time.Second), "strip_trailing_error", "sleep "+(backoff(2)+time.Second).String())
	})
	t.Run("abort_retry while waiting for the budget: the hold it may make is dropped, the grant is then stale", func(t *testing.T) {
		sc := newBudgetScript(t, halfJitter)
		sc.step(fail(unavailable, 503), "report_outcome success=false", "open_lifecycle", askLine(b1))
		sc.step(abortRetry, "drop_budget_hold", `auto_retry_end success=false attempt=1 error="Retry cancelled"`, "close_lifecycle")
		sc.step(grant(t0.Add(b1)))
	})
	t.Run("global abort while waiting for the budget", func(t *testing.T) {
		sc := newBudgetScript(t, halfJitter)
		sc.step(fail(unavailable, 503), "report_outcome success=false", "open_lifecycle", askLine(b1))
		sc.step(abortAll, "drop_budget_hold", `auto_retry_end success=false attempt=1 error="Retry cancelled"`, "close_lifecycle", "abort_stream")
		sc.step(grant(t0.Add(b1)))
	})
	t.Run("a turn ending while waiting for the budget makes the grant stale", func(t *testing.T) {
		sc := newBudgetScript(t, halfJitter)
		sc.step(fail(unavailable, 503), "report_outcome success=false", "open_lifecycle", askLine(b1))
		sc.step(ok(), "drop_budget_hold", "report_outcome success=true", "auto_retry_end success=true attempt=1", "close_lifecycle")
		sc.step(grant(t0.Add(b1)))
	})
}

// heldRetry runs a chain to a retry the budget held for extra beyond its
// backoff, sleeping.
func heldRetry(t *testing.T, extra time.Duration) *budgetScript {
	t.Helper()
	sc := newBudgetScript(t, halfJitter)
	b1 := backoff(1)
	sc.step(fail(unavailable, 503), "report_outcome success=false", "open_lifecycle", askLine(b1))
	sc.step(grant(t0.Add(b1+extra)), startLine(1, b1+extra, extra), "strip_trailing_error", "sleep "+(b1+extra).String())
	return sc
}

func TestChainBudgetRelease(t *testing.T) {
	t.Run("a release of the held retry moves its sleep", func(t *testing.T) {
		sc := heldRetry(t, 2*time.Second)
		oldSleep := sc.token
		sc.now = t0.Add(300 * time.Millisecond)
		sc.step(release(t0.Add(time.Second)), "cancel_sleep", "sleep 700ms")
		if sc.token == oldSleep {
			t.Fatal("the new sleep reuses the cancelled sleep's token")
		}
		sc.step(release(t0.Add(400 * time.Millisecond))) // released once: a second release is ignored
		if eff := sc.c.Step(Input{Kind: InputSleepDone, Now: sc.now, Token: oldSleep}); len(eff) != 0 {
			t.Fatalf("the cancelled sleep's firing gave %v", sc.render(eff))
		}
		sc.now = t0.Add(time.Second)
		sc.step(sleepDone, "schedule_continue 1ms gen=1")
		sc.step(ok(), "report_outcome success=true", "auto_retry_end success=true attempt=1", "close_lifecycle")
	})
	t.Run("a release already past sleeps 0", func(t *testing.T) {
		sc := heldRetry(t, 2*time.Second)
		sc.now = t0.Add(300 * time.Millisecond)
		sc.step(release(t0), "cancel_sleep", "sleep 0s")
	})
	t.Run("a release with another token is ignored", func(t *testing.T) {
		sc := heldRetry(t, 2*time.Second)
		in := release(t0)
		in.Token = sc.token // the sleep's token, not the ask's
		sc.step(in)
		in.Token = sc.ask + 100
		sc.step(in)
		sc.step(release(t0.Add(time.Second)), "cancel_sleep", "sleep 1s")
	})
	t.Run("not held (granted at due): ignored", func(t *testing.T) {
		sc := heldRetry(t, 0)
		sc.step(release(t0))
	})
	t.Run("not held (granted early): ignored", func(t *testing.T) {
		sc := newBudgetScript(t, halfJitter)
		sc.step(fail(unavailable, 503), "report_outcome success=false", "open_lifecycle", askLine(backoff(1)))
		sc.step(grant(t0), startLine(1, backoff(1), 0), "strip_trailing_error", "sleep "+backoff(1).String())
		sc.step(release(t0))
	})
	t.Run("after the sleep finished: ignored", func(t *testing.T) {
		sc := heldRetry(t, 2*time.Second)
		sc.step(sleepDone, "schedule_continue 1ms gen=1")
		sc.step(release(t0))
	})
	t.Run("after the turn ended: ignored", func(t *testing.T) {
		sc := heldRetry(t, 2*time.Second)
		sc.step(ok(), "cancel_sleep", "drop_budget_hold", "report_outcome success=true", "auto_retry_end success=true attempt=1", "close_lifecycle")
		sc.step(release(t0))
	})
	t.Run("after the turn ended with another failure: ignored, even once sleeping again", func(t *testing.T) {
		sc := heldRetry(t, 2*time.Second)
		held := sc.ask
		sc.step(fail(unavailable, 503), "cancel_sleep", "drop_budget_hold", "report_outcome success=false", askLine(backoff(2)))
		old := release(t0)
		old.Token = held
		sc.step(old)
		sc.step(grant(t0.Add(backoff(2)+time.Second)),
			startLine(2, backoff(2)+time.Second, time.Second), "strip_trailing_error", "sleep "+(backoff(2)+time.Second).String())
		sc.step(old)
		sc.step(release(t0), "cancel_sleep", "sleep 0s") // the new hold's own release works
	})
	t.Run("after the turn ended with another failure: ignored, even once sleeping unheld", func(t *testing.T) {
		sc := heldRetry(t, 2*time.Second)
		held := sc.ask
		sc.step(fail(unavailable, 503), "cancel_sleep", "drop_budget_hold", "report_outcome success=false", askLine(backoff(2)))
		sc.step(grant(t0.Add(backoff(2))), startLine(2, backoff(2), 0), "strip_trailing_error", "sleep "+backoff(2).String())
		old := release(t0)
		old.Token = held
		sc.step(old)
	})
	t.Run("after abort_retry: ignored", func(t *testing.T) {
		sc := heldRetry(t, 2*time.Second)
		held := sc.ask
		sc.step(abortRetry, "cancel_sleep", "drop_budget_hold", `auto_retry_end success=false attempt=1 error="Retry cancelled"`, "close_lifecycle")
		sc.step(release(t0))
		// nor by the next chain's unheld sleep
		sc.step(fail(unavailable, 503), "report_outcome success=false", "open_lifecycle", askLine(backoff(1)))
		sc.step(grant(t0.Add(backoff(1))), startLine(1, backoff(1), 0), "strip_trailing_error", "sleep "+backoff(1).String())
		old := release(t0)
		old.Token = held
		sc.step(old)
	})
	t.Run("after a global abort: ignored", func(t *testing.T) {
		sc := heldRetry(t, 2*time.Second)
		sc.step(abortAll, "cancel_sleep", "drop_budget_hold", `auto_retry_end success=false attempt=1 error="Retry cancelled"`, "close_lifecycle", "abort_stream")
		sc.step(release(t0))
	})
}

// Which turn ends the budget counts: successes and provider-load failures.
func TestChainBudgetRecordsOutcomes(t *testing.T) {
	userAbort := fail("stream stalled: no data for 120s", 0)
	userAbort.Aborts = AbortState{User: true}
	tests := []struct {
		name   string
		mutate func(*Settings)
		in     Input
		want   []string
	}{
		{"success with no chain open", nil, ok(), []string{"report_outcome success=true"}},
		{"transient failure", nil, fail("overloaded_error", 529),
			[]string{"report_outcome success=false", "open_lifecycle", askLine(backoff(1))}},
		{"rate limit", nil, fail("429 Too Many Requests", 429),
			[]string{"report_outcome success=false", "open_lifecycle", askLine(backoff(1))}},
		{"not retryable", nil, fail("401 invalid x-api-key", 401), nil},
		{"context overflow", nil, fail("prompt is too long: 230500 tokens > 200000 maximum", 400), []string{"route_to_compaction"}},
		{"usage limit", nil, fail("You exceeded your current quota (insufficient_quota)", 429),
			[]string{"open_lifecycle", "ask_credential_switch block=30m0s"}},
		{"a retryable error during a user abort", nil, userAbort, nil},
		// Neither counted against the provider nor held by the budget: it
		// retries at once.
		{"stale replay", nil, fail("Item with id 'rs_1' not found.", 400),
			[]string{"open_lifecycle", "reset_provider_session", "auto_retry_start 1/10 delay=0s budget=0s class=stale_replay",
				"strip_trailing_error", "sleep 0s"}},
		{"reasonless abort", nil, failMsg(&messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ABORTED, ErrorMessage: AbortSentinel}),
			[]string{"open_lifecycle", askLine(backoff(1))}},
		{"classifier refusal (model fallback off)", nil, failMsg(refusal(StopDetailRefusal)),
			[]string{"open_lifecycle", "close_lifecycle"}},
		// With auto-retry off the session records nothing.
		{"retry disabled: success", func(s *Settings) { s.Enabled = false }, ok(), nil},
		{"retry disabled: transient failure", func(s *Settings) { s.Enabled = false }, fail(unavailable, 503), nil},
		{"max retries 0: the failure is recorded, the chain ends", func(s *Settings) { s.MaxRetries = 0 }, fail(unavailable, 503),
			[]string{"report_outcome success=false", "open_lifecycle", `auto_retry_end success=false attempt=0 error="503 Service Unavailable"`, "close_lifecycle"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mutate []func(*Settings)
			if tt.mutate != nil {
				mutate = append(mutate, tt.mutate)
			}
			sc := newBudgetScript(t, halfJitter, mutate...)
			sc.step(tt.in, tt.want...)
		})
	}
}

// With the budget off (the default) a chain is the reference policy: it
// neither records outcomes nor asks the budget.
func TestChainBudgetDisabledIsReference(t *testing.T) {
	sc := newScript(t) // defaults: budget off
	if sc.settings.Budget.Enabled {
		t.Fatal("the budget is on by default")
	}
	var kinds []EffectKind
	do := func(in Input, want ...string) {
		t.Helper()
		in.Now = sc.now
		if in.Kind == InputTurnEnded {
			in.Settings = sc.settings
			in.Generation = sc.gen
		}
		if in.Kind == InputSleepDone || in.Kind == InputCredentialReply {
			in.Token = sc.token
		}
		eff := sc.c.Step(in)
		for _, e := range eff {
			kinds = append(kinds, e.Kind)
		}
		got := sc.render(eff)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("effects:\n  got:  %s\n  want: %s", strings.Join(got, "\n        "), strings.Join(want, "\n        "))
		}
	}
	do(ok())
	do(fail(unavailable, 503), "open_lifecycle", "auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
	do(release(t0))
	do(sleepDone, "schedule_continue 1ms gen=1")
	do(fail(unavailable, 503), "auto_retry_start 2/10 delay=1s class=transient", "strip_trailing_error", "sleep 1s")
	do(sleepDone, "schedule_continue 1ms gen=1")
	do(fail("You exceeded your current quota (insufficient_quota)", 429), "ask_credential_switch block=30m0s")
	in := credReply(false)
	in.RetryAt = t0.Add(20 * time.Second)
	do(in, "auto_retry_start 3/10 delay=21s class=usage_limit", "strip_trailing_error", "sleep 21s")
	do(ok(), "cancel_sleep", "auto_retry_end success=true attempt=3", "close_lifecycle")
	for _, k := range kinds {
		if k == ReportOutcome || k == AskBudget {
			t.Errorf("budget off: effect %s", k)
		}
	}
}

// A switched retry is a first attempt on another credential or model: the
// budget does not hold it.
func TestChainBudgetSwitchedRetryNotHeld(t *testing.T) {
	const quota = "You exceeded your current quota (insufficient_quota)"
	t.Run("usage limit, credential switched: no ask", func(t *testing.T) {
		sc := newBudgetScript(t, halfJitter)
		sc.step(fail(quota, 429), "open_lifecycle", "ask_credential_switch block=30m0s")
		sc.step(credReply(true),
			"auto_retry_start 1/10 delay=0s budget=0s class=usage_limit",
			"strip_trailing_error",
			"sleep 0s")
	})
	t.Run("usage limit, no switch: the wait is asked", func(t *testing.T) {
		sc := newBudgetScript(t, halfJitter)
		sc.step(fail(quota, 429), "open_lifecycle", "ask_credential_switch block=30m0s")
		in := credReply(false)
		in.RetryAt = t0.Add(20 * time.Second)
		sc.step(in, "ask_budget due=+21s latest=+5m0s")
		sc.step(grant(t0.Add(21*time.Second)),
			"auto_retry_start 1/10 delay=21s budget=0s class=usage_limit", "strip_trailing_error", "sleep 21s")
	})
	_, cooldown := LimitWait("overloaded_error", 529, float64(halfJitter))
	fallbackAsk := fmt.Sprintf("ask_model_fallback cooldown=%s pin=false", cooldown)
	t.Run("model fallback switched: no ask", func(t *testing.T) {
		sc := newBudgetScript(t, halfJitter, func(s *Settings) { s.ModelFallback = true })
		sc.step(fail("overloaded_error", 529), "report_outcome success=false", "open_lifecycle", fallbackAsk)
		sc.step(fbReply("anthropic/opus", "anthropic/sonnet", "default"),
			"retry_fallback_applied anthropic/opus -> anthropic/sonnet (default)",
			"auto_retry_start 1/10 delay=0s budget=0s class=transient",
			"strip_trailing_error",
			"sleep 0s")
	})
	t.Run("model fallback not switched: asked", func(t *testing.T) {
		sc := newBudgetScript(t, halfJitter, func(s *Settings) { s.ModelFallback = true })
		sc.step(fail("overloaded_error", 529), "report_outcome success=false", "open_lifecycle", fallbackAsk)
		sc.step(fbReply("", "", ""), askLine(backoff(1)))
	})
}

// budgetSim is the actor side in miniature: the chains of several sessions
// of one provider share a Budget; effects are routed the way the session
// and credentials actors route them.
type budgetSim struct {
	t        *testing.T
	b        *Budget
	settings Settings
	chains   map[string]*Chain
	wake     map[string]time.Time // end of the running sleep
	sleep    map[string]uint64    // token of the running sleep
}

func newBudgetSim(t *testing.T, bs BudgetSettings, sessions ...string) *budgetSim {
	s := DefaultSettingsNoFallback()
	s.Budget = bs
	sim := &budgetSim{t: t, b: NewBudget(bs), settings: s, chains: map[string]*Chain{},
		wake: map[string]time.Time{}, sleep: map[string]uint64{}}
	for _, name := range sessions {
		sim.chains[name] = NewChain(fixedSource(1))
	}
	return sim
}

func (sim *budgetSim) step(name string, in Input) {
	sim.t.Helper()
	effects := append([]Effect(nil), sim.chains[name].Step(in)...)
	for _, e := range effects {
		switch e.Kind {
		case ReportOutcome:
			for _, h := range append([]Hold(nil), sim.b.Report(in.Now, e.Success)...) {
				sim.step(h.Holder, Input{Kind: InputBudgetRelease, Now: in.Now, Token: h.Token, At: h.At})
			}
		case AskBudget:
			at := sim.b.Admit(in.Now, name, e.Token, e.Due, e.Latest)
			sim.step(name, Input{Kind: InputBudgetGrant, Now: in.Now, Token: e.Token, At: at})
		case Sleep:
			sim.wake[name], sim.sleep[name] = in.Now.Add(e.Delay), e.Token
		case DropBudgetHold:
			sim.b.Forget(name)
		case CancelSleep:
			if sim.sleep[name] != e.Token {
				sim.t.Fatalf("%s: cancel_sleep %d, running %d", name, e.Token, sim.sleep[name])
			}
			delete(sim.wake, name)
			delete(sim.sleep, name)
		}
	}
}

func (sim *budgetSim) fail(name string, now time.Time) {
	sim.t.Helper()
	sim.step(name, TurnEnded(now, sim.settings, errorMsg(unavailable, 503), AbortState{}, 1))
}

func (sim *budgetSim) succeed(name string, now time.Time) {
	sim.t.Helper()
	sim.step(name, TurnEnded(now, sim.settings, ok().Message, AbortState{}, 1))
}

func (sim *budgetSim) wantWake(name string, want time.Time) {
	sim.t.Helper()
	if got, ok := sim.wake[name]; !ok || !got.Equal(want) {
		sim.t.Fatalf("%s wakes at %s (sleeping %t), want %s", name, got.Sub(t0), ok, want.Sub(t0))
	}
}

// The chain and the budget agree on tokens: a hold's Token is the ask's,
// and its release moves the chain's sleep.
func TestChainWithSharedBudget(t *testing.T) {
	bs := enabledBudget(func(s *BudgetSettings) {
		s.MaxTokens = 4 // closed after two failures in a row
		s.TokenRatio = 1
		s.ProbeInterval = time.Second
	})
	sim := newBudgetSim(t, bs, "a", "b", "c", "d", "e")
	sim.fail("a", t0) // 3 tokens: open, goes at its backoff
	sim.wantWake("a", at(500))
	sim.fail("b", t0) // 2: closed; the first probe goes at its due
	sim.wantWake("b", at(500))
	sim.fail("c", t0) // 1: held behind the probe
	sim.wantWake("c", at(1500))
	sim.fail("d", t0) // 0: held one probe further
	sim.wantWake("d", at(2500))
	if sim.b.Held() != 2 {
		t.Fatalf("held %d, want 2", sim.b.Held())
	}

	sim.succeed("e", at(200)) // 1 token, still closed: the earliest hold (c) goes at its due
	sim.wantWake("c", at(500))
	sim.wantWake("d", at(2500))

	sim.succeed("e", at(300)) // 2, still closed: d goes now
	sim.wantWake("d", at(500))
	if sim.b.Held() != 0 {
		t.Fatalf("held %d, want 0", sim.b.Held())
	}

	sim.succeed("e", at(400)) // 3: open again
	sim.succeed("e", at(450)) // 4: full
	if !sim.b.Open() || sim.b.Tokens() != 4 {
		t.Fatalf("open=%t tokens=%v, want open and full", sim.b.Open(), sim.b.Tokens())
	}
	sim.wake1("a", at(500))
	sim.fail("a", at(600)) // 3 tokens: open, the second retry goes at its backoff
	sim.wantWake("a", at(1600))
}

// wake1 delivers the sleep firing of name at now.
func (sim *budgetSim) wake1(name string, now time.Time) {
	sim.t.Helper()
	sim.wantWake(name, now)
	sim.step(name, Input{Kind: InputSleepDone, Now: now, Token: sim.sleep[name]})
	delete(sim.wake, name)
}

// The usual way out of an outage: ack clocking releases the holds one by
// one while the budget is still closed, so nothing is held when it reopens
// and Record never resets the probe queue (see
// TestBudgetReopenWithoutHoldsRestartsProbeQueue). The next outage's first
// retry then waits for a slot left over from the last one.
func TestChainWithSharedBudgetNextOutageStartsFresh(t *testing.T) {
	bs := enabledBudget(func(s *BudgetSettings) {
		s.MaxTokens = 4
		s.TokenRatio = 1
		s.ProbeInterval = time.Second
	})
	sim := newBudgetSim(t, bs, "a", "b", "c", "d", "e")
	sim.fail("a", t0)
	sim.fail("b", t0)
	sim.fail("c", t0)         // held to 1500 ms
	sim.fail("d", t0)         // held to 2500 ms; the next slot is 3500 ms
	sim.succeed("e", at(200)) // releases c
	sim.succeed("e", at(300)) // releases d
	sim.succeed("e", at(400)) // 3 tokens: open, nothing held
	sim.fail("e", at(450))    // 2: a new outage; its first retry is the probe, at its due
	sim.wantWake("e", at(950))
}

// A retry the chain gave up on (abort_retry, or its turn ended) stays
// held in the budget: the chain has no effect to drop it, and the actors
// only Forget a session when it is released. The next success then spends
// its release on the dead hold, which the chain ignores, and the live held
// retry waits for its own probe slot.
func TestChainWithSharedBudgetAbortedHoldWastesRelease(t *testing.T) {
	bs := enabledBudget(func(s *BudgetSettings) {
		s.MaxTokens = 4
		s.TokenRatio = 1
		s.ProbeInterval = time.Second
	})
	sim := newBudgetSim(t, bs, "a", "b", "c", "d", "e")
	sim.fail("a", t0)
	sim.fail("b", t0)
	sim.fail("c", t0) // held to 1500 ms
	sim.fail("d", t0) // held to 2500 ms
	sim.step("c", Input{Kind: InputAbortRetry, Now: at(100)})
	sim.succeed("e", at(200)) // released: c's dead hold
	sim.wantWake("d", at(500))
}
