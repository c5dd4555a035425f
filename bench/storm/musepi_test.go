package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musepi/musepi/internal/testkit/soak"
	"github.com/musepi/musepi/retry"
)

// MusePi on the virtual clock, retry budget off and on, on the same
// sessions and scenario: nothing lost, and the budget thins the storm.
func TestMusePiVirtualBudget(t *testing.T) {
	defer goleak.VerifyNone(t)
	sessions := 500.0 // 2,000 with -tags soak
	if soak.Enabled {
		sessions = 2000
	}
	sc := testScenario(t, 10*time.Second, defaultMix)
	sc.UsageLimit = true
	settings := retry.DefaultSettings()
	settings.ModelFallback = false
	e := newTestEnv(t, "virtual", int(sessions), sc, settings)
	e.budgetCompared = true

	ctx := testCtx(t)
	var off, on System
	for _, run := range []struct {
		budget bool
		name   string
		into   *System
	}{
		{false, "musepi-budget-off", &off},
		{true, "musepi-budget-on", &on},
	} {
		s, err := runMusePi(ctx, e, run.budget, 0)
		if err != nil {
			t.Fatalf("budget %v: %v", run.budget, err)
		}
		if s.Name != run.name {
			t.Errorf("budget %v: System name %q, want %q", run.budget, s.Name, run.name)
		}
		f := s.Figures
		t.Logf("%s: requests %v (outage %v, retries in outage %v), drain %.2fs, extended %v, lockstep %.2f",
			s.Name, f["requests_total"], f["requests_outage"], f["retries_outage"], f["drain_seconds"],
			f["budget_extended_retries"], f["lockstep_index"])
		if f["prompts_started"] != sessions || f["prompts_lost"] != 0 || f["prompts_completed"] != sessions || f["prompts_failed"] != 0 {
			t.Errorf("%s: started, completed, failed, lost = %v, %v, %v, %v; want %d, %d, 0, 0", s.Name,
				f["prompts_started"], f["prompts_completed"], f["prompts_failed"], f["prompts_lost"], int(sessions), int(sessions))
		}
		if got, want := f["retry_attempts"], f["requests_total"]-sessions; got != want {
			t.Errorf("%s: retry_attempts = %v, want requests_total - sessions = %v", s.Name, got, want)
		}
		if got, want := f["retries_outage"], f["requests_outage"]-sessions; got != want {
			t.Errorf("%s: retries_outage = %v, want requests_outage - sessions = %v", s.Name, got, want)
		}
		if _, ok := f["drain_seconds"]; !ok {
			t.Errorf("%s: no drain_seconds", s.Name)
		}
		if s.Timeline == nil || len(s.Timeline.Requests) == 0 || len(s.Timeline.Completions) == 0 {
			t.Errorf("%s: no timeline", s.Name)
		}
		if _, ok := f["lateness_p99_ms"]; ok {
			t.Errorf("%s: lateness reported in virtual mode", s.Name)
		}
		*run.into = s
	}

	if got := off.Figures["requests_outage"]; got <= sessions {
		t.Errorf("budget off: requests_outage = %v, want more than %v", got, sessions)
	}
	if _, ok := off.Figures["budget_extended_retries"]; ok {
		t.Errorf("budget off: budget_extended_retries reported")
	}
	if got := on.Figures["budget_extended_retries"]; got <= 0 {
		t.Errorf("budget on: budget_extended_retries = %v (present: %v), want > 0",
			got, hasFigure(on, "budget_extended_retries"))
	}
	if a, b := on.Figures["retries_outage"], off.Figures["retries_outage"]; b <= 0 || a >= b/5 {
		t.Errorf("retries_outage: budget on %v, off %v; want on < off / 5", a, b)
	}
	if a, b := on.Figures["drain_seconds"], off.Figures["drain_seconds"]; a > 2*b {
		t.Errorf("drain_seconds: budget on %v, off %v; want on ≤ 2 × off", a, b)
	}
}

// Without budgets compared, the single MusePi run is plainly "musepi".
func TestMusePiVirtualName(t *testing.T) {
	defer goleak.VerifyNone(t)
	settings := retry.DefaultSettings()
	settings.ModelFallback = false
	e := newTestEnv(t, "virtual", 50, testScenario(t, time.Second, "503=1"), settings)
	s, err := runMusePi(testCtx(t), e, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "musepi" {
		t.Errorf("name %q, want musepi", s.Name)
	}
	if f := s.Figures; f["prompts_completed"] != 50 || f["prompts_lost"] != 0 {
		t.Errorf("completed %v, lost %v; want 50, 0", f["prompts_completed"], f["prompts_lost"])
	}
}

func hasFigure(s System, key string) bool {
	_, ok := s.Figures[key]
	return ok
}
