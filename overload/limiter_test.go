package overload

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/pacing"
)

var (
	t0  = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	key = Key{Provider: "anthropic", Model: "claude"}
)

// A step of a script: what is done, so long after t0, and what it says,
// then the limit, the calls in flight and the waiting ones.
type step struct {
	after time.Duration
	do    func(l *Limiter, now time.Time) string
	want  string
}

// send sends calls of priority; each goes or waits.
func send(p pacing.Priority, ids ...string) func(*Limiter, time.Time) string {
	return func(l *Limiter, _ time.Time) string {
		var said []string
		for _, id := range ids {
			if l.Acquire(id, key, p) {
				said = append(said, id+" goes")
			} else {
				said = append(said, id+" waits")
			}
		}
		return strings.Join(said, ", ")
	}
}

// end ends calls in flight with o, in order, and says the grants.
func end(o Outcome, ids ...string) func(*Limiter, time.Time) string {
	return func(l *Limiter, now time.Time) string {
		var said []string
		for _, id := range ids {
			for _, g := range l.Release(now, id, o) {
				said = append(said, g.ID+" granted")
			}
		}
		if len(said) == 0 {
			return "ended"
		}
		return strings.Join(said, ", ")
	}
}

func answer(ttft time.Duration, ids ...string) func(*Limiter, time.Time) string {
	return end(Outcome{Result: Answered, FirstToken: ttft}, ids...)
}
func overloaded(ids ...string) func(*Limiter, time.Time) string {
	return end(Outcome{Result: Overloaded}, ids...)
}
func timedOut(ids ...string) func(*Limiter, time.Time) string {
	return end(Outcome{Result: TimedOut}, ids...)
}
func neutral(ids ...string) func(*Limiter, time.Time) string {
	return end(Outcome{Result: Neutral}, ids...)
}

func cancel(id string) func(*Limiter, time.Time) string {
	return func(l *Limiter, _ time.Time) string { return fmt.Sprintf("cancel %s: %v", id, l.Cancel(id)) }
}

// calls are n ids with prefix: c1 ... cn.
func calls(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return ids
}

func run(t *testing.T, s Settings, steps []step) {
	t.Helper()
	l := New(s)
	for i, st := range steps {
		now := t0.Add(st.after)
		said := st.do(l, now)
		said += fmt.Sprintf("; limit %d, %d in flight", l.Limit(key), l.InFlight(key))
		if w := l.Waiting(key); w != [3]int{} {
			said += fmt.Sprintf(", waiting %v", w)
		}
		if said != st.want && !strings.HasSuffix(said, "; "+st.want) {
			t.Fatalf("step %d (+%v):\n got: %s\nwant: %s", i, st.after, said, st.want)
		}
	}
}

func TestLimitArithmetic(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		s     Settings
		steps []step
	}{
		{"starts at Initial (100)", Settings{}, []step{
			{0, send(pacing.Normal, calls("c", 101)...), "limit 100, 100 in flight, waiting [0 1 0]"},
		}},
		{"slow start: until an overload, each answer raises it by one, a round doubles it", Settings{Initial: 2}, []step{
			{0, send(pacing.Normal, calls("c", 7)...), "c1 goes, c2 goes, c3 waits, c4 waits, c5 waits, c6 waits, c7 waits; limit 2, 2 in flight, waiting [0 5 0]"},
			{ms, answer(100*ms, "c1"), "c3 granted, c4 granted; limit 3, 3 in flight, waiting [0 3 0]"},
			{ms, answer(100*ms, "c2", "c3", "c4"), "c5 granted, c6 granted, c7 granted; limit 6, 3 in flight"},
		}},
		{"never above Max: Initial above it is Max", Settings{Initial: 8, Max: 4}, []step{
			{0, send(pacing.Normal, "c1", "c2", "c3", "c4", "c5"), "c1 goes, c2 goes, c3 goes, c4 goes, c5 waits; limit 4, 4 in flight, waiting [0 1 0]"},
			{ms, answer(100*ms, "c1"), "c5 granted; limit 4, 4 in flight"},
		}},
		{"an overload answer lowers the limit to 0.9 of the calls in flight when it went", Settings{}, []step{
			{0, send(pacing.Normal, calls("c", 10)...), "limit 100, 10 in flight"},
			{ms, overloaded("c10"), "ended; limit 9, 9 in flight"},
			{ms, send(pacing.Normal, "d1"), "d1 waits; limit 9, 9 in flight, waiting [0 1 0]"},
		}},
		{"a time-out lowers it the same way", Settings{}, []step{
			{0, send(pacing.Normal, calls("c", 20)...), "limit 100, 20 in flight"},
			{ms, timedOut("c20"), "ended; limit 18, 19 in flight"},
		}},
		{"refusals of one round do not compound: the limit comes down to the lowest level one saw", Settings{}, []step{
			{0, send(pacing.Normal, calls("c", 30)...), "limit 100, 30 in flight"},
			{ms, overloaded("c30"), "ended; limit 27, 29 in flight"},
			{ms, overloaded("c29", "c28", "c27", "c26", "c25"), "ended; limit 22, 24 in flight"},
			// c1 went after the decrease: a new round, 0.9 of 21 in flight.
			{ms, neutral("c24", "c23", "c22", "c21"), "ended; limit 22, 20 in flight"},
			{ms, send(pacing.Normal, "d1"), "d1 goes; limit 22, 21 in flight"},
			{2 * ms, overloaded("d1"), "ended; limit 18, 20 in flight"},
		}},
		{"never below 1: one probe always goes out", Settings{}, []step{
			{0, send(pacing.Normal, "c1", "c2"), "limit 100, 2 in flight"},
			{ms, overloaded("c2"), "ended; limit 1, 1 in flight"},
			{ms, overloaded("c1"), "ended; limit 1, 0 in flight"},
			{ms, send(pacing.Normal, "p1", "p2"), "p1 goes, p2 waits; limit 1, 1 in flight, waiting [0 1 0]"},
			{2 * ms, overloaded("p1"), "p2 granted; limit 1, 1 in flight"},
			{3 * ms, answer(0, "p2"), "ended; limit 2, 0 in flight"},
		}},
		{"429s and other failures only free the place", Settings{}, []step{
			{0, send(pacing.Normal, calls("c", 10)...), "limit 100, 10 in flight"},
			{ms, neutral("c10", "c9"), "ended; limit 100, 8 in flight"},
		}},
		{"within ProbeAfter of a decrease, answers raise it by one a round (1/limit each)", Settings{Max: 10}, []step{
			{0, send(pacing.Normal, calls("c", 10)...), "limit 10, 10 in flight"},
			{ms, overloaded("c10"), "ended; limit 9, 9 in flight"},
			{time.Second, answer(0, "c9", "c8", "c7", "c6", "c5"), "ended; limit 9, 4 in flight"},
			{time.Second, send(pacing.Normal, calls("w", 5)...), "limit 9, 9 in flight"},
			{2 * time.Second, answer(0, "w1", "w2", "w3", "w4"), "ended; limit 9, 5 in flight"},
			{2 * time.Second, answer(0, "w5"), "ended; limit 10, 4 in flight"},
		}},
		{"after ProbeAfter, by one an answer (a round doubles it)", Settings{}, []step{
			{0, send(pacing.Normal, calls("c", 10)...), "limit 100, 10 in flight"},
			{ms, overloaded("c10"), "ended; limit 9, 9 in flight"},
			{ms, send(pacing.Normal, calls("w", 20)...), "limit 9, 9 in flight, waiting [0 20 0]"},
			{3*time.Second + ms, answer(0, "c9"), "w1 granted, w2 granted; limit 10, 10 in flight, waiting [0 18 0]"},
			{3*time.Second + ms, answer(0, "c8", "c7", "c6"),
				"w3 granted, w4 granted, w5 granted, w6 granted, w7 granted, w8 granted; limit 13, 13 in flight, waiting [0 12 0]"},
		}},
		{"not while fewer than half the limit were in flight: the limit did not hold the call back", Settings{Max: 10}, []step{
			{0, send(pacing.Normal, calls("c", 5)...), "limit 10, 5 in flight"},
			{ms, overloaded("c5"), "ended; limit 4, 4 in flight"},
			{ms, answer(0, "c4", "c3", "c2"), "ended; limit 5, 1 in flight"},
			{5 * time.Second, answer(0, "c1"), "ended; limit 5, 0 in flight"},
			{5 * time.Second, send(pacing.Normal, "d1", "d2"), "limit 5, 2 in flight"},
			{5 * time.Second, answer(0, "d1"), "ended; limit 5, 1 in flight"},
		}},
		{"never above Max", Settings{Max: 3}, []step{
			{0, send(pacing.Normal, "c1", "c2", "c3"), "limit 3, 3 in flight"},
			{ms, answer(0, "c1", "c2", "c3"), "ended; limit 3, 0 in flight"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { run(t, tt.s, tt.steps) })
	}
}

// warm answers n calls sent one at a time at ttft each, so that the
// baseline is ttft and the limit stays where it is.
func warm(n int, ttft time.Duration) func(*Limiter, time.Time) string {
	return func(l *Limiter, now time.Time) string {
		for i := range n {
			id := fmt.Sprintf("warm%d", i)
			l.Acquire(id, key, pacing.Normal)
			l.Release(now, id, Outcome{Result: Answered, FirstToken: ttft})
		}
		return "warm"
	}
}

func TestGradient(t *testing.T) {
	ms := time.Millisecond
	// A baseline of 100 ms; a decrease to 18 long ago; d1 goes with 18 in
	// flight, and answers.
	setup := []step{
		{0, warm(10, 100*ms), "warm; limit 100, 0 in flight"},
		{0, send(pacing.Normal, calls("c", 20)...), "limit 100, 20 in flight"},
		{0, overloaded("c20"), "ended; limit 18, 19 in flight"},
		{0, neutral("c19", "c18"), "ended; limit 18, 17 in flight"},
		{10 * time.Second, send(pacing.Normal, "d1"), "d1 goes; limit 18, 18 in flight"},
	}
	tests := []struct {
		name  string
		ttft  time.Duration
		limit int
	}{
		{"at the baseline: raised", 100 * ms, 19},
		{"within the tolerance (2×): raised", 200 * ms, 19},
		{"2.5×: lowered by 0.2 × (1 − 2/2.5), to 96 % of the calls in flight", 250 * ms, 17},
		{"4×: the gradient is 0.5, lowered to 90 %", 400 * ms, 16},
		{"40×: clamped at 0.5, no further", 4000 * ms, 16},
		{"not measured: normal", 0, 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := append(slices.Clone(setup), step{10 * time.Second, answer(tt.ttft, "d1"), fmt.Sprintf("ended; limit %d, 17 in flight", tt.limit)})
			run(t, Settings{}, steps)
		})
	}
}

func TestQueueOrder(t *testing.T) {
	ms := time.Millisecond
	run(t, Settings{Max: 1}, []step{
		{0, send(pacing.Normal, "busy"), "busy goes; limit 1, 1 in flight"},
		{0, send(pacing.Low, "low1"), "low1 waits; limit 1, 1 in flight, waiting [0 0 1]"},
		{0, send(pacing.Normal, "n1", "n2"), "n1 waits, n2 waits; limit 1, 1 in flight, waiting [0 2 1]"},
		{0, send(pacing.High, "h1"), "h1 waits; limit 1, 1 in flight, waiting [1 2 1]"},
		{0, send(pacing.High, "h2"), "h2 waits; limit 1, 1 in flight, waiting [2 2 1]"},
		{0, cancel("h2"), "cancel h2: true; limit 1, 1 in flight, waiting [1 2 1]"},
		{0, cancel("h2"), "cancel h2: false; limit 1, 1 in flight, waiting [1 2 1]"},
		{ms, neutral("busy"), "h1 granted; limit 1, 1 in flight, waiting [0 2 1]"},
		{ms, neutral("h1"), "n1 granted; limit 1, 1 in flight, waiting [0 1 1]"},
		{ms, neutral("n1"), "n2 granted; limit 1, 1 in flight, waiting [0 0 1]"},
		{ms, neutral("n2"), "low1 granted; limit 1, 1 in flight"},
		{ms, neutral("low1"), "ended; limit 1, 0 in flight"},
		{ms, neutral("never-sent"), "ended; limit 1, 0 in flight"},
	})
}

func TestHistory(t *testing.T) {
	l := New(Settings{Max: 10})
	for _, id := range calls("c", 5) {
		l.Acquire(id, key, pacing.Normal)
	}
	l.Release(t0.Add(time.Second), "c5", Outcome{Result: Overloaded})
	l.Release(t0.Add(2*time.Second), "c4", Outcome{Result: Overloaded}) // same round, 0.9 × 4
	l.Release(t0.Add(9*time.Second), "c3", Outcome{Result: Answered})
	got := fmt.Sprint(l.History(key))
	want := fmt.Sprint([]Change{
		{At: t0.Add(time.Second), Limit: 4, Reason: Overload},
		{At: t0.Add(2 * time.Second), Limit: 3, Reason: Overload},
		{At: t0.Add(9 * time.Second), Limit: 4, Reason: Raised},
	})
	if got != want {
		t.Fatalf("History:\n got %s\nwant %s", got, want)
	}
	if h := l.History(Key{Provider: "other", Model: "m"}); h != nil {
		t.Fatalf("History of an unknown model = %v, want nil", h)
	}
}

// TryAcquire goes only when Acquire would: room, and nobody waiting; it
// never queues.
func TestTryAcquire(t *testing.T) {
	l := New(Settings{Initial: 1})
	if !l.TryAcquire("c1", key) {
		t.Fatal("TryAcquire with room = false")
	}
	if l.HasRoom(key) || !l.HasRoom(Key{Provider: "p", Model: "never asked"}) {
		t.Fatal("HasRoom: a full limit has room, or a model never asked has none")
	}
	if l.TryAcquire("c2", key) || l.Waiting(key) != [3]int{} {
		t.Fatalf("TryAcquire of a full limit went or queued: waiting %v", l.Waiting(key))
	}
	l.Acquire("w1", key, pacing.Low) // waits
	l.Release(t0, "c1", Outcome{Result: Neutral})
	if l.InFlight(key) != 1 { // w1 took the freed place
		t.Fatalf("in flight %d, want w1's 1", l.InFlight(key))
	}
	other := Key{Provider: "anthropic", Model: "haiku"}
	if !l.TryAcquire("c3", other) || l.InFlight(other) != 1 {
		t.Fatal("TryAcquire on another model with room did not go")
	}
}

// Members limiters (one per node of a cluster) start and probe as one:
// each starts at Initial over Members, and within ProbeAfter of a
// decrease each grows by one a round over Members.
func TestMembersShareTheStartAndTheProbe(t *testing.T) {
	grown := func(s Settings) (start, after int) {
		l := New(s)
		start = l.Limit(key)
		for _, id := range calls("c", start) {
			l.Acquire(id, key, pacing.Normal)
		}
		l.Release(t0, fmt.Sprintf("c%d", start), Outcome{Result: Overloaded}) // 0.9 × 10: 9
		// Six rounds of 9 answers, the limit used in full.
		for i := 1; i <= 54; i++ {
			l.Acquire(fmt.Sprintf("d%d", i), key, pacing.Normal)
			old := fmt.Sprintf("c%d", i)
			if i > start-1 {
				old = fmt.Sprintf("d%d", i-start+1)
			}
			l.Release(t0.Add(time.Second), old, Outcome{Result: Answered})
		}
		return start, l.Limit(key)
	}
	oneStart, one := grown(Settings{Initial: 10, Max: 100})
	threeStart, three := grown(Settings{Initial: 30, Max: 100, Members: 3})
	if oneStart != 10 || threeStart != 10 {
		t.Fatalf("starts %d and %d, want 10 each (30 over 3 members)", oneStart, threeStart)
	}
	if one != 13 || three != 10 {
		t.Errorf("six rounds after a decrease to 9: one limiter at %d, one of three at %d; want 13 and 10 (a third of its growth)", one, three)
	}
	if got := New(Settings{Members: 500}).Limit(key); got != 1 {
		t.Errorf("Initial shared among more members than it has calls: %d, want 1", got)
	}
}
