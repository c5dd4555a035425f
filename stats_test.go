package musepi_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/retry"
)

// Runtime.Stats on a runtime driven into each state it reports: a
// credential blocked by a usage limit (its session switched to the other
// key), a model cooling down after a fallback, a session waiting out a
// 30 s retry-after, and the retry budget's tokens after a failure.
func TestStatsFigures(t *testing.T) {
	settings := statsSettings()
	h := newHarnessCreds(t, []musepi.Credential{{Name: "a", APIKey: "ka"}, {Name: "b", APIKey: "kb"}},
		musepi.WithRetrySettings(settings))

	if st := h.rt.Stats(); st.Sessions != 0 || st.Retrying != 0 || !st.WaitingUntil.IsZero() ||
		len(st.CredentialsBlocked) != 0 || len(st.ModelsCoolingDown) != 0 || st.BudgetTokens["p"] != 10 {
		t.Fatalf("stats of a fresh runtime: %+v", st)
	}

	// Key a over its usage limit: the session moves to key b and answers.
	limited, _ := h.session(musepi.WithSessionID("limited"))
	h.p.SetScript(limited.ID(), fail(429, "429 usage limit reached for this key"), answer("from key b"))
	expectAnswer(t, h.runPrompt(limited, "hi"), "from key b")

	// p/fb fails with a 503: it cools down and the session falls back to q/m.
	fellBack, _ := h.session(musepi.WithSessionID("fell-back"), musepi.WithModel("p/fb"))
	h.p.SetScript(fellBack.ID(), fail(503, "503 Service Unavailable"))
	h.other.SetScript(fellBack.ID(), answer("from q"))
	expectAnswer(t, h.runPrompt(fellBack, "hi"), "from q")

	// A session of a role without a fallback chain waits out retry-after 30 s.
	waiting, rec := h.session(musepi.WithSessionID("waiting"), musepi.WithModel("q/w"), musepi.WithRole("solo"))
	h.other.SetScript(waiting.ID(), fail(429, "429 Too Many Requests", "retry-after", "30"), answer("late"))
	ch := h.prompt(waiting, "hi")
	h.advance(time.Second)

	st := h.rt.Stats()
	budget, err := h.rt.RetryBudget(context.Background(), "p")
	if err != nil {
		t.Fatal(err)
	}
	retryStart := rec.ofType("auto_retry_start")[0].(musepi.AutoRetryStart)
	due := retryStart.Header().Time.Add(retryStart.Delay) // the event's time is in whole ms
	checks := []struct {
		figure string
		ok     bool
	}{
		{"sessions", st.Sessions == 3},
		{"busy", st.Busy == 1},
		{"retrying (chains open)", st.Retrying == 1},
		{"by phase", st.ByPhase["backoff"] == 1 && st.ByPhase["idle"] == 2},
		{"waiting until", retryStart.Delay == 30*time.Second && !st.WaitingUntil.Before(due) && st.WaitingUntil.Sub(due) < time.Millisecond},
		{"credentials blocked", len(st.CredentialsBlocked) == 1 && st.CredentialsBlocked["p"] == 1},
		{"models cooling down", slices.Equal(st.ModelsCoolingDown, []string{"p/fb"})},
		// One transient failure each (the 503 on p, the 429 on q) took a
		// token of 10; a usage limit does not load the provider.
		{"budget tokens", st.BudgetTokens["p"] == budget.Tokens && budget.Tokens == 9 && st.BudgetTokens["q"] == 9},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: stats %+v (budget of p %+v)", c.figure, st, budget)
		}
	}

	// Once the wait is over and the cooldown and the block have expired,
	// the figures are back to rest.
	h.advance(30 * time.Second)
	expectAnswer(t, h.settle(ch), "late")
	h.advance(31 * time.Minute)
	if st := h.rt.Stats(); st.Retrying != 0 || !st.WaitingUntil.IsZero() || len(st.CredentialsBlocked) != 0 || len(st.ModelsCoolingDown) != 0 {
		t.Errorf("stats at rest: %+v", st)
	}
}

// statsSettings is the default settings with the retry budget
// on and the "default" role falling back to q/m.
func statsSettings() retry.Settings {
	s := withFallback("q/m")
	s.Budget.Enabled = true
	return s
}
