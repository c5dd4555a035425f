package retry

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// t0 is the budget tests' start.
var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// at is t0 plus n milliseconds: the budget tests' clock.
func at(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// enabledBudget is the default budget, turned on, with mutate applied.
func enabledBudget(mutate ...func(*BudgetSettings)) BudgetSettings {
	s := DefaultBudgetSettings()
	s.Enabled = true
	for _, m := range mutate {
		m(&s)
	}
	return s
}

// budgetStep is one thing that happens to a budget, with what must follow.
type budgetStep struct {
	desc string
	run  func(t *testing.T, b *Budget[string])
}

// failures records n failures at t0; a failure never releases anything.
func failures(n int) budgetStep {
	return budgetStep{fmt.Sprintf("%d failures", n), func(t *testing.T, b *Budget[string]) {
		t.Helper()
		for range n {
			if rel := b.Report(t0, false); len(rel) != 0 {
				t.Fatalf("a failure released %v", rel)
			}
		}
	}}
}

// failureAt records one failure at now ms with the holds in place.
func failureAt(now int) budgetStep {
	return budgetStep{fmt.Sprintf("failure at %dms", now), func(t *testing.T, b *Budget[string]) {
		t.Helper()
		held := b.Held()
		if rel := b.Report(at(now), false); len(rel) != 0 {
			t.Fatalf("a failure released %v", rel)
		}
		if b.Held() != held {
			t.Fatalf("a failure changed the holds: %d, was %d", b.Held(), held)
		}
	}}
}

// success records a success at now ms and wants exactly the releases want.
func success(now int, want ...Hold[string]) budgetStep {
	return budgetStep{fmt.Sprintf("success at %dms", now), func(t *testing.T, b *Budget[string]) {
		t.Helper()
		got := append([]Hold[string](nil), b.Report(at(now), true)...)
		if len(got) == 0 && len(want) == 0 {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("releases:\n  got:  %s\n  want: %s", renderHolds(got), renderHolds(want))
		}
	}}
}

// admit asks for the retry of holder due at due ms, unbounded, at now ms.
func admit(now int, holder string, token uint64, due, want int) budgetStep {
	return admitBy(now, holder, token, due, -1, want)
}

// admitBy is admit bounded by latest ms (-1: unbounded).
func admitBy(now int, holder string, token uint64, due, latest, want int) budgetStep {
	desc := fmt.Sprintf("admit %s due %dms", holder, due)
	var bound time.Time
	if latest >= 0 {
		bound = at(latest)
		desc += fmt.Sprintf(" latest %dms", latest)
	}
	return budgetStep{desc, func(t *testing.T, b *Budget[string]) {
		t.Helper()
		if got := b.Admit(at(now), holder, token, at(due), bound, "to "+holder); !got.Equal(at(want)) {
			t.Fatalf("Admit = %s, want %dms", got.Sub(t0), want)
		}
	}}
}

func forget(holder string) budgetStep {
	return budgetStep{"forget " + holder, func(t *testing.T, b *Budget[string]) { b.Forget(holder) }}
}

// state checks the budget's tokens, openness and number of holds.
func state(tokens float64, open bool, held int) budgetStep {
	return budgetStep{fmt.Sprintf("state %v open=%t held=%d", tokens, open, held), func(t *testing.T, b *Budget[string]) {
		t.Helper()
		if math.Abs(b.Tokens()-tokens) > 1e-9 || b.Open() != open || b.Held() != held {
			t.Fatalf("tokens=%v open=%t held=%d, want %v %t %d", b.Tokens(), b.Open(), b.Held(), tokens, open, held)
		}
	}}
}

// held checks only the number of holds.
func held(n int) budgetStep {
	return budgetStep{fmt.Sprintf("held=%d", n), func(t *testing.T, b *Budget[string]) {
		t.Helper()
		if b.Held() != n {
			t.Fatalf("Held() = %d, want %d", b.Held(), n)
		}
	}}
}

// hold is the release of holder's retry (ticket), due at due ms, going out
// at at ms, to where its admit said ("to HOLDER").
func hold(holder string, ticket uint64, due, out int) Hold[string] {
	return Hold[string]{Holder: holder, Ticket: ticket, Due: at(due), At: at(out), To: "to " + holder}
}

func renderHolds(hs []Hold[string]) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = fmt.Sprintf("%s#%d due=%s at=%s (%s)", h.Holder, h.Ticket, h.Due.Sub(t0), h.At.Sub(t0), h.To)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

type budgetCase struct {
	name     string
	settings BudgetSettings
	steps    []budgetStep
}

func runBudgetCases(t *testing.T, cases []budgetCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.settings.Validate(); err != nil {
				t.Fatalf("settings: %v", err)
			}
			b := NewBudget[string](tc.settings)
			for i, st := range tc.steps {
				t.Run(fmt.Sprintf("%d %s", i, st.desc), func(t *testing.T) { st.run(t, b) })
				if t.Failed() {
					return
				}
			}
		})
	}
}

// The token bucket: full at the start, -1 per failure (never below 0),
// +TokenRatio per success (never above MaxTokens), open while more than
// half full.
func TestBudgetTokens(t *testing.T) {
	tests := []struct {
		name     string
		settings BudgetSettings
		outcomes string // F: failure, S: success
		tokens   float64
		open     bool
	}{
		{"starts full and open", enabledBudget(), "", 10, true},
		{"a failure costs one token", enabledBudget(), "F", 9, true},
		{"four failures in a row: 6 tokens, still open", enabledBudget(), "FFFF", 6, true},
		{"five failures in a row: exactly half, closed", enabledBudget(), "FFFFF", 5, false},
		{"tokens never go below zero", enabledBudget(), strings.Repeat("F", 12), 0, false},
		{"a success refunds tokenRatio: 5.1 reopens", enabledBudget(), "FFFFFS", 5.1, true},
		{"a success on a full bucket stays full", enabledBudget(), "S", 10, true},
		{"refunds are capped at maxTokens", enabledBudget(), "F" + strings.Repeat("S", 15), 10, true},
		{"from empty, ten successes give one token", enabledBudget(), strings.Repeat("F", 12) + strings.Repeat("S", 10), 1, false},
		{"maxTokens 3: one failure leaves 2 > 1.5, open", enabledBudget(func(s *BudgetSettings) { s.MaxTokens = 3; s.TokenRatio = 1 }), "F", 2, true},
		{"maxTokens 3: two failures leave 1, closed", enabledBudget(func(s *BudgetSettings) { s.MaxTokens = 3; s.TokenRatio = 1 }), "FF", 1, false},
		{"maxTokens 3, ratio 1: a success reopens", enabledBudget(func(s *BudgetSettings) { s.MaxTokens = 3; s.TokenRatio = 1 }), "FFS", 2, true},
		{"maxTokens 1: one failure closes", enabledBudget(func(s *BudgetSettings) { s.MaxTokens = 1; s.TokenRatio = 1 }), "F", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBudget[string](tt.settings)
			for _, o := range tt.outcomes {
				b.Report(t0, o == 'S')
			}
			if math.Abs(b.Tokens()-tt.tokens) > 1e-9 || b.Open() != tt.open {
				t.Errorf("after %q: tokens=%v open=%t, want %v %t", tt.outcomes, b.Tokens(), b.Open(), tt.tokens, tt.open)
			}
			if b.Held() != 0 {
				t.Errorf("Held() = %d with no admissions", b.Held())
			}
		})
	}
}

// Admit: at due while open; while closed, at the next probe slot, one per
// probeInterval, never later than latest.
func TestBudgetAdmit(t *testing.T) {
	runBudgetCases(t, []budgetCase{
		{"open: at its due, nothing held", enabledBudget(), []budgetStep{
			admit(0, "a", 1, 500, 500),
			admit(0, "b", 2, 500, 500),
			admit(0, "c", 3, 9000, 9000),
			state(10, true, 0),
		}},
		{"open: a bound is not applied (the chain never asks past it)", enabledBudget(), []budgetStep{
			admitBy(0, "a", 1, 500, 500, 500),
			held(0),
		}},
		{"closed: the first retry goes at its due and is not held (it is the probe)", enabledBudget(), []budgetStep{
			failures(5),
			admit(0, "a", 1, 500, 500),
			state(5, false, 0),
		}},
		{"closed: the next ones are spaced by probeInterval and held", enabledBudget(), []budgetStep{
			failures(5),
			admit(0, "a", 1, 500, 500),
			admit(0, "b", 2, 500, 750),
			admit(0, "c", 3, 600, 1000),
			admit(10, "d", 4, 20, 1250),
			held(3),
		}},
		{"closed: a due past the next slot keeps its own due, the queue continues after it", enabledBudget(), []budgetStep{
			failures(5),
			admit(0, "a", 1, 500, 500),
			admit(0, "b", 2, 2000, 2000),
			held(0),
			admit(0, "c", 3, 100, 2250),
			held(1),
		}},
		{"closed: a due exactly on the slot is not held", enabledBudget(), []budgetStep{
			failures(5),
			admit(0, "a", 1, 500, 500),
			admit(0, "b", 2, 750, 750),
			held(0),
		}},
		{"closed: probeInterval is a setting", enabledBudget(func(s *BudgetSettings) { s.ProbeInterval = time.Second }), []budgetStep{
			failures(5),
			admit(0, "a", 1, 0, 0),
			admit(0, "b", 2, 0, 1000),
			admit(0, "c", 3, 0, 2000),
			held(2),
		}},
		{"latest caps the slot and does not consume it", enabledBudget(), []budgetStep{
			failures(5),
			admit(0, "a", 1, 500, 500),
			admitBy(0, "b", 2, 500, 600, 600),
			held(1),
			admit(0, "c", 3, 500, 750), // b's capped retry left the 750 ms slot free
			admitBy(0, "d", 4, 500, 5000, 1000),
			admit(0, "e", 5, 500, 1250),
			held(4),
		}},
		{"latest on the slot itself takes the slot", enabledBudget(), []budgetStep{
			failures(5),
			admit(0, "a", 1, 500, 500),
			admitBy(0, "b", 2, 500, 750, 750),
			admit(0, "c", 3, 500, 1000),
			held(2),
		}},
		{"re-Admit of the same holder replaces its hold", enabledBudget(func(s *BudgetSettings) { s.TokenRatio = 0.5 }), []budgetStep{
			failures(6), // 4 tokens: a success leaves it closed
			admit(0, "a", 1, 500, 500),
			admit(0, "b", 2, 500, 750),
			held(1),
			admit(100, "b", 7, 800, 1000),
			held(1),
			success(200, hold("b", 7, 800, 800)),
			held(0),
		}},
		{"re-Admit that is not held drops the old hold", enabledBudget(), []budgetStep{
			failures(5),
			admit(0, "a", 1, 500, 500),
			admit(0, "b", 2, 500, 750),
			held(1),
			admit(0, "b", 3, 5000, 5000),
			held(0),
		}},
	})
}

// Record: a success while closed releases the earliest hold at once; the
// success that reopens releases them all, spread over releaseWindow.
func TestBudgetRecordReleases(t *testing.T) {
	halfRatio := func(s *BudgetSettings) { s.TokenRatio = 0.5 }
	// four holds, b to e, at 750, 1000, 1250 and 1500 ms, all due at 500 ms,
	// behind a's probe at 500 ms
	fourHeld := []budgetStep{
		failures(5),
		admit(0, "a", 1, 500, 500),
		admit(0, "b", 2, 500, 750),
		admit(0, "c", 3, 500, 1000),
		admit(0, "d", 4, 500, 1250),
		admit(0, "e", 5, 500, 1500),
		held(4),
	}
	with := func(base []budgetStep, more ...budgetStep) []budgetStep {
		return append(append([]budgetStep(nil), base...), more...)
	}
	runBudgetCases(t, []budgetCase{
		{"a success while closed releases exactly the earliest hold, at max(now, due)", enabledBudget(halfRatio), []budgetStep{
			failures(6), // 4 tokens
			admit(0, "a", 1, 500, 500),
			admit(0, "b", 2, 500, 750),
			admit(0, "c", 3, 500, 1000),
			held(2),
			success(100, hold("b", 2, 500, 500)), // 4.5: before its due, at its due
			state(4.5, false, 1),
			success(600, hold("c", 3, 500, 600)), // 5: past its due, now
			state(5, false, 0),
			success(700), // 5.5: reopens with nothing held
			state(5.5, true, 0),
		}},
		{"a success while closed with nothing held releases nothing", enabledBudget(halfRatio), []budgetStep{
			failures(6),
			success(0),
			state(4.5, false, 0),
		}},
		{"holds going out at the same time are released in holder order", enabledBudget(halfRatio), []budgetStep{
			failures(6),
			admit(0, "a", 1, 500, 500),
			admitBy(0, "y", 2, 500, 600, 600),
			admitBy(0, "x", 3, 500, 600, 600),
			success(100, hold("x", 3, 500, 500)),
			success(100, hold("y", 2, 500, 500)),
			held(0),
		}},
		{"a failure releases nothing and keeps the holds", enabledBudget(halfRatio), []budgetStep{
			failures(6),
			admit(0, "a", 1, 500, 500),
			admit(0, "b", 2, 500, 750),
			failureAt(5000),
			state(3, false, 1),
		}},
		{"the reopening success releases all holds over releaseWindow in slot order, none before its due",
			enabledBudget(), with(fourHeld,
				// step 1 s / 4 = 250 ms: spread at 100, 350, 600, 850 ms
				success(100,
					hold("b", 2, 500, 500),
					hold("c", 3, 500, 500),
					hold("d", 4, 500, 600),
					hold("e", 5, 500, 850)),
				state(5.1, true, 0),
			)},
		{"a hold whose own slot comes before its spread time is skipped (and dropped)",
			enabledBudget(func(s *BudgetSettings) { s.ReleaseWindow = 2 * time.Second }), with(fourHeld,
				// step 500 ms: spread at 100, 600, 1100, 1600; e's slot is 1500
				success(100,
					hold("b", 2, 500, 500),
					hold("c", 3, 500, 600),
					hold("d", 4, 500, 1100)),
				state(5.1, true, 0),
			)},
		{"a long window skips every hold but the first",
			enabledBudget(func(s *BudgetSettings) { s.ReleaseWindow = 4 * time.Second }), with(fourHeld,
				success(100, hold("b", 2, 500, 500)),
				held(0),
			)},
		{"a zero window releases all at once (each at its due)",
			enabledBudget(func(s *BudgetSettings) { s.ReleaseWindow = 0 }), with(fourHeld,
				success(600,
					hold("b", 2, 500, 600),
					hold("c", 3, 500, 600),
					hold("d", 4, 500, 600),
					hold("e", 5, 500, 600)),
			)},
		{"holds going out at the same time are spread in holder order", enabledBudget(), []budgetStep{
			failures(5),
			admit(0, "a", 1, 500, 500),
			admitBy(0, "y", 2, 500, 600, 600),
			admitBy(0, "x", 3, 500, 600, 600),
			success(100, hold("x", 3, 500, 500), hold("y", 2, 500, 600)), // spread at 100, 600
		}},
		{"a single hold is released at once", enabledBudget(), []budgetStep{
			failures(5),
			admit(0, "a", 1, 500, 500),
			admit(0, "b", 2, 500, 750),
			success(600, hold("b", 2, 500, 600)),
			state(5.1, true, 0),
		}},
		{"spread times run from now even when the holds are due later", enabledBudget(), []budgetStep{
			failures(5),
			admit(0, "a", 1, 3000, 3000),
			admit(0, "b", 2, 500, 3250),
			admit(0, "c", 3, 3100, 3500),
			success(0, hold("b", 2, 500, 500), hold("c", 3, 3100, 3100)),
		}},
		{"reopening restarts the probe queue", enabledBudget(), with(fourHeld,
			success(100, hold("b", 2, 500, 500), hold("c", 3, 500, 500), hold("d", 4, 500, 600), hold("e", 5, 500, 850)),
			failureAt(200), // 4.1: closed again
			admit(200, "f", 6, 700, 700),
			admit(200, "g", 7, 700, 950),
		)},
		{"after reopening, retries go at their due", enabledBudget(), with(fourHeld,
			success(100, hold("b", 2, 500, 500), hold("c", 3, 500, 500), hold("d", 4, 500, 600), hold("e", 5, 500, 850)),
			admit(200, "f", 6, 700, 700),
			admit(200, "g", 7, 700, 700),
			held(0),
		)},
	})
}

func TestBudgetForgetAndPrune(t *testing.T) {
	halfRatio := func(s *BudgetSettings) { s.TokenRatio = 0.5 }
	threeQueued := []budgetStep{
		failures(6), // 4 tokens: successes leave it closed
		admit(0, "a", 1, 500, 500),
		admit(0, "b", 2, 500, 750),
		admit(0, "c", 3, 500, 1000),
		held(2),
	}
	with := func(more ...budgetStep) []budgetStep {
		return append(append([]budgetStep(nil), threeQueued...), more...)
	}
	runBudgetCases(t, []budgetCase{
		{"Forget drops a hold: the next success releases the one after it", enabledBudget(halfRatio), with(
			forget("b"),
			held(1),
			success(100, hold("c", 3, 500, 500)),
		)},
		{"Forget of a holder with nothing held is a no-op", enabledBudget(halfRatio), with(
			forget("a"),
			forget("nobody"),
			held(2),
		)},
		{"a hold whose time has passed is pruned, not released", enabledBudget(halfRatio), with(
			success(800, hold("c", 3, 500, 800)), // b went out at 750 on its own
			held(0),
		)},
		{"a hold going out right now is pruned", enabledBudget(halfRatio), with(
			success(1000), // both b (750) and c (1000) are out
			held(0),
		)},
		{"the reopening success prunes before spreading", enabledBudget(func(s *BudgetSettings) { s.ReleaseWindow = 200 * time.Millisecond }), []budgetStep{
			failures(5),
			admit(0, "a", 1, 500, 500),
			admit(0, "b", 2, 500, 750),
			admit(0, "c", 3, 500, 1000),
			admit(0, "d", 4, 500, 1250),
			success(900, hold("c", 3, 500, 900), hold("d", 4, 500, 1000)), // b is out; two left: step 100 ms
			state(5.1, true, 0),
		}},
	})
}

// stats checks Stats(): the state it mirrors and the counters.
func stats(delayed, released int64) budgetStep {
	return budgetStep{fmt.Sprintf("stats delayed=%d released=%d", delayed, released), func(t *testing.T, b *Budget[string]) {
		t.Helper()
		want := BudgetStats{Tokens: b.Tokens(), Held: b.Held(), Delayed: delayed, Released: released}
		if got := b.Stats(); got != want {
			t.Fatalf("Stats() = %+v, want %+v", got, want)
		}
	}}
}

// Stats counts every retry held past its backoff (each admission) and
// every early release; pruned, skipped and forgotten holds are not released.
func TestBudgetStats(t *testing.T) {
	runBudgetCases(t, []budgetCase{
		{"a fresh budget", enabledBudget(), []budgetStep{
			stats(0, 0),
			state(10, true, 0),
		}},
		{"held admissions and ack-clocked releases", enabledBudget(func(s *BudgetSettings) { s.TokenRatio = 0.5 }), []budgetStep{
			failures(6),
			admit(0, "a", 1, 500, 500), // the probe: not delayed
			admit(0, "b", 2, 500, 750),
			admitBy(0, "c", 3, 500, 600, 600),
			admit(0, "d", 4, 500, 1000),
			stats(3, 0),
			admit(0, "d", 5, 500, 1250), // re-admitted: delayed again
			stats(4, 0),
			forget("c"),
			success(100, hold("b", 2, 500, 500)),
			stats(4, 1),
			success(1300), // d went out on its own: pruned
			stats(4, 1),
		}},
		{"the reopening release counts the holds released, not the skipped ones",
			enabledBudget(func(s *BudgetSettings) { s.ReleaseWindow = 4 * time.Second }), []budgetStep{
				failures(5),
				admit(0, "a", 1, 500, 500),
				admit(0, "b", 2, 500, 750),
				admit(0, "c", 3, 500, 1000),
				success(100, hold("b", 2, 500, 500)), // c's own slot (1000) comes before 2100
				stats(2, 1),
				admit(200, "e", 6, 700, 700), // open: not delayed
				stats(2, 1),
			}},
	})
}

func TestBudgetSettingsValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*BudgetSettings)
		field  string // "" means valid
	}{
		{"defaults enabled", func(*BudgetSettings) {}, ""},
		{"maxTokens 1", func(s *BudgetSettings) { s.MaxTokens = 1; s.TokenRatio = 1 }, ""},
		{"maxTokens 1e6", func(s *BudgetSettings) { s.MaxTokens = 1e6 }, ""},
		{"tokenRatio equal to maxTokens", func(s *BudgetSettings) { s.TokenRatio = 10 }, ""},
		{"releaseWindow 0", func(s *BudgetSettings) { s.ReleaseWindow = 0 }, ""},
		{"probeInterval 1 ns", func(s *BudgetSettings) { s.ProbeInterval = 1 }, ""},

		{"maxTokens 0", func(s *BudgetSettings) { s.MaxTokens = 0 }, "retry.budget.maxTokens"},
		{"maxTokens below 1", func(s *BudgetSettings) { s.MaxTokens = 0.5; s.TokenRatio = 0.1 }, "retry.budget.maxTokens"},
		{"maxTokens 2e6", func(s *BudgetSettings) { s.MaxTokens = 2e6 }, "retry.budget.maxTokens"},
		{"maxTokens NaN", func(s *BudgetSettings) { s.MaxTokens = math.NaN() }, "retry.budget.maxTokens"},
		{"maxTokens +Inf", func(s *BudgetSettings) { s.MaxTokens = math.Inf(1) }, "retry.budget.maxTokens"},
		{"tokenRatio 0", func(s *BudgetSettings) { s.TokenRatio = 0 }, "retry.budget.tokenRatio"},
		{"tokenRatio negative", func(s *BudgetSettings) { s.TokenRatio = -0.1 }, "retry.budget.tokenRatio"},
		{"tokenRatio above maxTokens", func(s *BudgetSettings) { s.TokenRatio = 10.5 }, "retry.budget.tokenRatio"},
		{"tokenRatio NaN", func(s *BudgetSettings) { s.TokenRatio = math.NaN() }, "retry.budget.tokenRatio"},
		{"probeInterval 0", func(s *BudgetSettings) { s.ProbeInterval = 0 }, "retry.budget.probeIntervalMs"},
		{"probeInterval negative", func(s *BudgetSettings) { s.ProbeInterval = -time.Millisecond }, "retry.budget.probeIntervalMs"},
		{"releaseWindow -1 ms", func(s *BudgetSettings) { s.ReleaseWindow = -time.Millisecond }, "retry.budget.releaseWindowMs"},

		// The first bad field is reported, in declaration order.
		{"maxTokens before tokenRatio", func(s *BudgetSettings) { s.MaxTokens = 0; s.TokenRatio = 0 }, "retry.budget.maxTokens"},
		{"tokenRatio before probeInterval", func(s *BudgetSettings) { s.TokenRatio = 0; s.ProbeInterval = 0 }, "retry.budget.tokenRatio"},
		{"probeInterval before releaseWindow", func(s *BudgetSettings) { s.ProbeInterval = 0; s.ReleaseWindow = -time.Second }, "retry.budget.probeIntervalMs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := enabledBudget(tt.mutate)
			checkSettingsError(t, s.Validate(), tt.field)
			if tt.field == "" {
				return
			}

			// The same bad values are not checked while the budget is off.
			s.Enabled = false
			if err := s.Validate(); err != nil {
				t.Errorf("disabled: Validate() = %v; want nil", err)
			}
		})
	}
	t.Run("a disabled zero budget is valid", func(t *testing.T) {
		if err := (BudgetSettings{}).Validate(); err != nil {
			t.Errorf("BudgetSettings{}.Validate() = %v; want nil", err)
		}
	})
}

func TestBudgetSettingsProblems(t *testing.T) {
	bad := enabledBudget(func(s *BudgetSettings) {
		s.MaxTokens, s.TokenRatio, s.ProbeInterval, s.ReleaseWindow = 0, 0, 0, -time.Second
	})
	var fields []string
	for _, p := range bad.Problems() {
		fields = append(fields, p.Field)
	}
	want := []string{"retry.budget.maxTokens", "retry.budget.tokenRatio", "retry.budget.probeIntervalMs", "retry.budget.releaseWindowMs"}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("Problems() fields = %q; want every bad field in field order %q", fields, want)
	}
	if err := bad.Validate(); err == nil || err.Error() != bad.Problems()[0].Error() {
		t.Errorf("Validate() = %v; want the first problem %v", err, bad.Problems()[0])
	}
	if p := enabledBudget().Problems(); len(p) != 0 {
		t.Errorf("enabled defaults: Problems() = %v; want none", p)
	}
	bad.Enabled = false
	if p := bad.Problems(); len(p) != 0 {
		t.Errorf("disabled: Problems() = %v; want none", p)
	}
}

func TestDefaultBudgetSettings(t *testing.T) {
	got := DefaultBudgetSettings()
	want := BudgetSettings{
		Enabled:       false,
		MaxTokens:     10,
		TokenRatio:    0.1,
		ProbeInterval: 250 * time.Millisecond,
		ReleaseWindow: time.Second,
	}
	if got != want {
		t.Errorf("DefaultBudgetSettings() = %+v; want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("DefaultBudgetSettings().Validate() = %v; want nil", err)
	}
	got.Enabled = true
	if err := got.Validate(); err != nil {
		t.Errorf("enabled DefaultBudgetSettings().Validate() = %v; want nil", err)
	}
	b := NewBudget[string](got)
	if b.Tokens() != 10 || !b.Open() || b.Held() != 0 {
		t.Errorf("NewBudget[string](defaults): tokens=%v open=%t held=%d; want 10, true, 0", b.Tokens(), b.Open(), b.Held())
	}
}

// Reopening ends the outage: its probe queue must not delay the next one.
// releaseAll resets the queue, but Record skips it when nothing is held
// (the `case len(b.held) == 0` arm comes first), so a probe slot reserved
// by a retry that was not held (it went out at its own due) outlives the
// recovery and delays the first retry of the next outage.
func TestBudgetReopenWithoutHoldsRestartsProbeQueue(t *testing.T) {
	runBudgetCases(t, []budgetCase{
		{"reopening with nothing held restarts the probe queue", enabledBudget(), []budgetStep{
			failures(5),                  // 5 tokens: closed
			admit(0, "a", 1, 8000, 8000), // the probe, not held; next slot 8250 ms
			success(100),                 // 5.1: open again, nothing to release
			failureAt(200),               // 4.1: a new outage
			admit(200, "b", 2, 700, 700), // got 8250 ms: the old outage's slot
		}},
	})
}
