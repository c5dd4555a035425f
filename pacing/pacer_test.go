package pacing

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"

	"github.com/musepi/musepi/provider/ratelimit"
)

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestReserveChoosesAndWaits(t *testing.T) {
	limits := map[string]Limits{"a": {RPM: 60, TPM: 6000}, "b": {RPM: 60, TPM: 6000}}
	small := Need{Input: 100, Output: 100}
	tests := []struct {
		name   string
		before func(p *Pacer) // spends budget first
		prefer string
		need   Need
		want   Decision
	}{
		{"the preferred key when it has room", nil, "a", small,
			Decision{Grant: Grant{ID: "s", Credential: "a"}}},
		{"the key with the most room when the preferred has none",
			func(p *Pacer) { p.Reserve(t0, "x", Normal, "a", Need{Input: 5900}) }, "a", small,
			Decision{Grant: Grant{ID: "s", Credential: "b", Switched: true}}},
		{"most room, not the first free",
			func(p *Pacer) {
				p.creds[0].buckets[ratelimit.Tokens].level = 500 // a: little room, b: full
			}, "", small,
			Decision{Grant: Grant{ID: "s", Credential: "b"}}},
		{"a wait for the key that refills first, naming the limit",
			func(p *Pacer) {
				p.Reserve(t0, "x", Normal, "a", Need{Input: 5950})
				p.Reserve(t0, "y", Normal, "b", Need{Input: 5900})
			}, "a", small,
			// b lacks 100 tokens at 100 tokens/s: 1 s; a lacks 150: 1.5 s.
			Decision{Grant: Grant{ID: "s", Credential: "b"}, Wait: time.Second, Limit: ratelimit.Tokens}},
		{"a call larger than the window goes once the bucket is full", nil, "a", Need{Input: 9000},
			Decision{Grant: Grant{ID: "s", Credential: "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New([]string{"a", "b"}, limits, t0)
			if tt.before != nil {
				tt.before(p)
			}
			if got := p.Reserve(t0, "s", Normal, tt.prefer, tt.need); got != tt.want {
				t.Errorf("Reserve = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestUnconfiguredKeysNeverWait(t *testing.T) {
	p := New([]string{"a"}, nil, t0)
	for i := range 1000 {
		if d := p.Reserve(t0, "s", Normal, "a", Need{Input: 1e6}); d.Wait != 0 {
			t.Fatalf("call %d waits %v with no limit known", i, d.Wait)
		}
	}
	if p.Paced() {
		t.Error("Paced with no limit known")
	}
}

func TestReleaseGoesByPriorityThenArrival(t *testing.T) {
	p := New([]string{"a"}, map[string]Limits{"a": {RPM: 60}}, t0) // one request a second
	p.Reserve(t0, "first", Normal, "a", Need{})                    // takes the bucket's 60
	for range 59 {
		p.Reserve(t0, "fill", Normal, "a", Need{})
	}
	for _, c := range []struct {
		id string
		p  Priority
	}{{"low-1", Low}, {"normal-1", Normal}, {"high-1", High}, {"low-2", Low}, {"high-2", High}, {"normal-2", Normal}} {
		if d := p.Reserve(t0, c.id, c.p, "a", Need{}); d.Wait <= 0 {
			t.Fatalf("%s did not wait", c.id)
		}
	}
	if got := p.Waiting(); got != [3]int{2, 2, 2} {
		t.Errorf("Waiting = %v, want [2 2 2]", got)
	}
	var order []string
	now := t0
	for range 6 {
		next, ok := p.NextRelease(now)
		if !ok {
			t.Fatal("nothing to release while calls wait")
		}
		now = next
		for _, g := range p.Release(now) {
			order = append(order, g.ID)
		}
	}
	want := []string{"high-1", "high-2", "normal-1", "normal-2", "low-1", "low-2"}
	if len(order) != len(want) {
		t.Fatalf("released %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("released %v, want %v", order, want)
		}
	}
}

func TestNewCallsQueueBehindWaitersOfTheirPriority(t *testing.T) {
	p := New([]string{"a"}, map[string]Limits{"a": {TPM: 6000}}, t0) // 100 tokens a second
	p.Reserve(t0, "big", Normal, "a", Need{Input: 6000})
	if d := p.Reserve(t0, "waits", Normal, "a", Need{Input: 500}); d.Wait != 5*time.Second {
		t.Fatalf("waits: %+v, want a 5 s wait", d)
	}
	// 1 s later 100 tokens are back: enough for a small call, but the
	// earlier normal call waits for more, so a normal call queues...
	if d := p.Reserve(at(1000), "small-normal", Normal, "a", Need{Input: 50}); d.Wait == 0 {
		t.Error("a normal call passed a waiting normal call")
	}
	// ...while a high-priority one, with no high call waiting, goes.
	if d := p.Reserve(at(1000), "small-high", High, "a", Need{Input: 50}); d.Wait != 0 {
		t.Errorf("a high call waited behind normal ones: %+v", d)
	}
}

func TestCancelForgetsTheWaiter(t *testing.T) {
	p := New([]string{"a"}, map[string]Limits{"a": {RPM: 1}}, t0)
	p.Reserve(t0, "x", Normal, "a", Need{})
	p.Reserve(t0, "y", Normal, "a", Need{})
	if !p.Cancel("y") {
		t.Fatal("Cancel of a waiting call = false")
	}
	if p.Cancel("y") {
		t.Error("Cancel twice = true")
	}
	if _, ok := p.NextRelease(t0); ok {
		t.Error("a release is due with nothing waiting")
	}
	if got := p.Release(at(60_000)); len(got) != 0 {
		t.Errorf("released a cancelled call: %v", got)
	}
}

func TestSettleReturnsWhatWasNotUsed(t *testing.T) {
	tests := []struct {
		name string
		used Usage
		want float64 // tokens left afterwards
	}{
		{"used all it reserved", Usage{Sent: true, Input: 1000, Output: 1000}, 4000},
		{"used less: the rest comes back", Usage{Sent: true, Input: 1000, Output: 200}, 4800},
		{"never sent: all comes back", Usage{}, 6000},
		{"used more than it reserved", Usage{Sent: true, Input: 3000, Output: 1000}, 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New([]string{"a"}, map[string]Limits{"a": {RPM: 60, TPM: 6000}}, t0)
			need := Need{Input: 1000, Output: 1000}
			p.Reserve(t0, "s", Normal, "a", need)
			if seq := p.Settle(t0, "s", tt.used); seq != 1 {
				t.Errorf("Settle = %d, want the grant's seq 1", seq)
			}
			if got, _ := remaining(p, t0, "a", ratelimit.Tokens); got != tt.want {
				t.Errorf("tokens left = %v, want %v", got, tt.want)
			}
			wantReq := 59.0
			if !tt.used.Sent {
				wantReq = 60
			}
			if got, _ := remaining(p, t0, "a", ratelimit.Requests); got != wantReq {
				t.Errorf("requests left = %v, want %v", got, wantReq)
			}
		})
	}
}

func TestObserveCorrectsTheBudget(t *testing.T) {
	snap := func(kind Kind, l ratelimit.Limit) ratelimit.Snapshot {
		var s ratelimit.Snapshot
		s.Set(kind, l)
		return s
	}
	tests := []struct {
		name      string
		limits    Limits
		announced ratelimit.Snapshot
		later     time.Duration
		want      float64 // requests left later
	}{
		// The latest response read sets the budget: what remains, less
		// what every call still out takes (the server may have counted
		// some: the budget errs low, never high).
		{"headers seed an unconfigured key",
			Limits{}, snap(ratelimit.Requests, ratelimit.Limit{Limit: 600, Remaining: 10, Reset: at(59_000), HasLimit: true, HasRemaining: true}),
			0, 10 - 2},
		{"the refill reaches the limit at the reset",
			Limits{}, snap(ratelimit.Requests, ratelimit.Limit{Limit: 600, Remaining: 0, Reset: at(60_000), HasLimit: true, HasRemaining: true}),
			30 * time.Second, 300 - 2},
		{"headers raise the configured limit and the rate",
			Limits{RPM: 60}, snap(ratelimit.Requests, ratelimit.Limit{Limit: 6000, Remaining: 6000, Reset: at(0), HasLimit: true, HasRemaining: true}),
			30 * time.Second, 6000}, // full again
		{"headers without a reset raise the rate only",
			Limits{RPM: 60}, snap(ratelimit.Requests, ratelimit.Limit{Limit: 6000, Remaining: 6000, HasLimit: true, HasRemaining: true}),
			30 * time.Second, 57 + 3000},
		// Without a reset the response cannot be placed among others: it
		// only lowers the budget, less the calls granted after it.
		{"a remaining count alone",
			Limits{RPM: 60}, snap(ratelimit.Requests, ratelimit.Limit{Remaining: 5, HasRemaining: true}),
			0, 5 - 1},
		{"a limit alone keeps the level",
			Limits{RPM: 60}, snap(ratelimit.Requests, ratelimit.Limit{Limit: 120, HasLimit: true}),
			0, 57},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New([]string{"a"}, map[string]Limits{"a": tt.limits}, t0)
			p.Reserve(t0, "before", Normal, "a", Need{}) // out, counted by the server already
			p.Reserve(t0, "s", Normal, "a", Need{})
			p.Reserve(t0, "after", Normal, "a", Need{}) // out, not counted by the server yet
			seq := p.Settle(t0, "s", Usage{Sent: true, Input: 10})
			p.Observe(t0, "a", seq, tt.announced)
			if got, _ := remaining(p, t0.Add(tt.later), "a", ratelimit.Requests); got != tt.want {
				t.Errorf("requests left = %v, want %v", got, tt.want)
			}
		})
	}
}

// Responses come back in any order, and the server may count calls in
// another order than they were granted: a response that left the server
// before others, or counted its call before calls granted earlier, says
// more remains than does. No order leaves room the server does not have
// (before, the last response read set the budget: in a storm of 2,000
// sessions it jumped by hundreds of requests, and as many 429s followed).
func TestObserveIgnoresOlderResponses(t *testing.T) {
	inOrder := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	for _, tt := range []struct {
		name     string
		counted  []int // the calls in the order the server counted them
		answered []int // the order their responses are read
	}{
		{"in order", inOrder, inOrder},
		{"answered reversed", inOrder, []int{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
		{"answered shuffled", inOrder, []int{3, 7, 0, 9, 1, 8, 2, 6, 4, 5}},
		{"the last granted counted first", []int{9, 0, 1, 2, 3, 4, 5, 6, 7, 8}, []int{9, 0, 1, 2, 3, 4, 5, 6, 7, 8}},
		{"counted and answered shuffled", []int{4, 1, 9, 0, 7, 2, 8, 3, 6, 5}, []int{9, 2, 4, 0, 7, 5, 1, 8, 3, 6}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const n = 10
			p := New([]string{"a"}, map[string]Limits{"a": {RPM: n}}, t0)
			for i := range n {
				if d := p.Reserve(t0, fmt.Sprint(i), Normal, "a", Need{}); d.Wait != 0 {
					t.Fatalf("call %d waits", i)
				}
			}
			for _, i := range tt.answered {
				seq := p.Settle(t0, fmt.Sprint(i), Usage{Sent: true, Input: 10})
				p.Observe(t0, "a", seq, serverSaw(n, slices.Index(tt.counted, i)))
				if got, _ := remaining(p, t0, "a", ratelimit.Requests); got > 0 {
					t.Fatalf("after call %d's answer: %v requests left, want none (the server has none)", i, got)
				}
			}
		})
	}
}

// serverSaw is what a server with a window of n requests a minute, full
// at t0, announces to the call it counted (rank+1)-th at t0: what remains,
// and when the window is full again (each request counted moves it a
// minute/n later).
func serverSaw(n, rank int) ratelimit.Snapshot {
	var s ratelimit.Snapshot
	s.Set(ratelimit.Requests, ratelimit.Limit{Limit: int64(n), Remaining: int64(n - rank - 1),
		Reset: t0.Add(time.Duration(rank+1) * time.Minute / time.Duration(n)), HasLimit: true, HasRemaining: true})
	return s
}

// Resets in whole seconds (Anthropic's) often tie: a tie does not tell
// which call the server counted last, so it only lowers the budget.
func TestTiedResetsOnlyLower(t *testing.T) {
	const n = 10
	p := New([]string{"a"}, map[string]Limits{"a": {RPM: n}}, t0)
	for i := range 3 {
		p.Reserve(t0, fmt.Sprint(i), Normal, "a", Need{})
	}
	// Counted in order, answered 2, 0, 1, every reset the same second.
	for _, i := range []int{2, 0, 1} {
		var s ratelimit.Snapshot
		s.Set(ratelimit.Requests, ratelimit.Limit{Limit: n, Remaining: int64(n - i - 1), Reset: at(60_000), HasLimit: true, HasRemaining: true})
		p.Observe(t0, "a", p.Settle(t0, fmt.Sprint(i), Usage{Sent: true, Input: 10}), s)
		if got, _ := remaining(p, t0, "a", ratelimit.Requests); got > n-3 {
			t.Fatalf("after call %d's answer: %v requests left, want at most %d", i, got, n-3)
		}
	}
}

// The latest response read sets the budget, down as well as up: after a
// response out of date lowered it, the next latest one brings it back to
// what the server has.
func TestTheLatestResponseSetsTheBudget(t *testing.T) {
	const n = 10
	p := New([]string{"a"}, map[string]Limits{"a": {RPM: n}}, t0)
	for i := range 3 {
		p.Reserve(t0, fmt.Sprint(i), Normal, "a", Need{})
	}
	// The server counted 2, then 0, then 1; 0 is read first, then 2 (the
	// latest: it sets the budget, 1 still out), then 1.
	for _, c := range []struct{ call, rank int }{{0, 1}, {2, 0}, {1, 2}} {
		seq := p.Settle(t0, fmt.Sprint(c.call), Usage{Sent: true, Input: 10})
		p.Observe(t0, "a", seq, serverSaw(n, c.rank))
	}
	// 0's response (9 - 1 remain, 1 and 2 still out) set it at 7, an
	// error low; 1's, the latest, sets it to what the server has: 7.
	if got, _ := remaining(p, t0, "a", ratelimit.Requests); got != n-3 {
		t.Errorf("requests left = %v, want %d", got, n-3)
	}
}

func TestSettleAfterAResponseSetTheBudget(t *testing.T) {
	var s ratelimit.Snapshot // no requests reset: it only lowers the budget
	s.Set(ratelimit.Tokens, ratelimit.Limit{Limit: 6000, Remaining: 1500, Reset: at(30_000), HasLimit: true, HasRemaining: true})
	need := Need{Input: 500, Output: 500}
	for _, tt := range []struct {
		name string
		used Usage
		want float64 // tokens left
	}{
		// The response counted it: the server took its 1,000 before, and
		// gives back the 300 it did not use.
		{"answered: the unused output comes back", Usage{Sent: true, Input: 500, Output: 200}, 1500 - 1000 + 300},
		// Refused: the server held nothing, and the response said so.
		{"refused: nothing comes back", Usage{Sent: true}, 1500 - 1000},
		{"never sent: nothing comes back", Usage{}, 1500 - 1000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := New([]string{"a"}, map[string]Limits{"a": {TPM: 6000}}, t0)
			p.Reserve(t0, "earlier", Normal, "a", need) // out when the later call's response comes
			p.Reserve(t0, "s", Normal, "a", need)
			p.Reserve(t0, "later", Normal, "a", need) // not counted by the server yet
			p.Observe(t0, "a", p.Settle(t0, "s", Usage{Sent: true, Input: 500, Output: 500}), s)
			p.Settle(t0, "earlier", tt.used)
			if got, _ := remaining(p, t0, "a", ratelimit.Tokens); got != tt.want {
				t.Errorf("tokens left = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]Priority{"high": High, "": Normal, "normal": Normal, "low": Low} {
		if got, err := ParsePriority(in); err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParsePriority("urgent"); err == nil {
		t.Error("ParsePriority(urgent): no error")
	}
}

func TestBlockedKeysAreNotSwitchedTo(t *testing.T) {
	p := New([]string{"a", "b"}, map[string]Limits{"a": {RPM: 1}, "b": {RPM: 60}}, t0)
	p.Block("b", at(60_000)) // a usage limit on b
	p.Reserve(t0, "x", Normal, "a", Need{})
	if d := p.Reserve(t0, "s", Normal, "a", Need{}); d.Wait == 0 || d.Credential != "a" {
		t.Errorf("Reserve = %+v; want a wait on a (b is blocked)", d)
	}
	p.Block("b", time.Time{})
	if got := p.Release(t0); len(got) != 1 || got[0].Credential != "b" || !got[0].Switched {
		t.Errorf("Release = %+v; want s switched to b once it is free", got)
	}
}

func TestWaitCountsTheCallsAhead(t *testing.T) {
	p := New([]string{"a", "b"}, map[string]Limits{"a": {RPM: 60}, "b": {RPM: 60}}, t0) // two keys, a request a second each
	for range 120 {
		p.Reserve(t0, "fill", Normal, "a", Need{})
	}
	// Both keys are empty and refill 2 requests a second together: the n-th
	// waiter goes after about n/2 s, and never before its own key refills
	// (1 s).
	var waits []time.Duration
	for i := range 5 {
		waits = append(waits, p.Reserve(t0, fmt.Sprint(i), Normal, "a", Need{}).Wait)
	}
	want := []time.Duration{time.Second, time.Second, 1500 * time.Millisecond, 2 * time.Second, 2500 * time.Millisecond}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v; want %v", waits, want)
		}
	}
}

func TestEstimateInput(t *testing.T) {
	text := func(s string) *messages.Entry {
		return &messages.Entry{Entry: &messages.Entry_User{User: &messages.UserMessage{Text: s}}}
	}
	long := strings.Repeat("word ", 200) // 1000 bytes
	tests := []struct {
		name    string
		context []*messages.Entry
		tools   []provider.ToolSpec
		min     int64
		max     int64
	}{
		{"nothing", nil, nil, 0, 0},
		{"a short prompt: its framing", []*messages.Entry{text("hi")}, nil, 5, 8},
		{"a long prompt: about a token per 4 bytes", []*messages.Entry{text(long)}, nil, 250, 260},
		{"tools count", []*messages.Entry{text("hi")}, []provider.ToolSpec{{Name: "ls", SchemaJSON: strings.Repeat("x", 400)}}, 105, 110},
	}
	for _, tt := range tests {
		if got := EstimateInput(tt.context, tt.tools); got < tt.min || got > tt.max {
			t.Errorf("%s: %d tokens; want %d to %d", tt.name, got, tt.min, tt.max)
		}
	}
	if got := OutputBound(provider.NewScripted()); got != DefaultOutputBound {
		t.Errorf("OutputBound of a provider that says none = %d; want %d", got, DefaultOutputBound)
	}
}

// remaining is what credential has left of kind k at now (false: no limit
// known), as Levels reports it.
func remaining(p *Pacer, now time.Time, credential string, k Kind) (float64, bool) {
	for _, l := range p.Levels(now) {
		if l.Credential == credential && l.Kind == k {
			return l.Remaining, true
		}
	}
	return 0, false
}
