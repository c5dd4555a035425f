package pacing

import (
	"fmt"
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
		{"a call larger than every window never goes", nil, "a", Need{Input: 9000},
			Decision{Grant: Grant{ID: "s", Credential: "a"}, TooLarge: Oversize{Kind: ratelimit.Tokens, Need: 9000, Limit: 6000}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New([]string{"a", "b"}, limits, t0, Options{StickyWait: -1, Window: time.Minute})
			if tt.before != nil {
				tt.before(p)
			}
			if got := p.Reserve(t0, "s", Normal, tt.prefer, tt.need); got != tt.want {
				t.Errorf("Reserve = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestReleaseGoesByPriorityThenArrival(t *testing.T) {
	p := New([]string{"a"}, map[string]Limits{"a": {RPM: 60}}, t0, Options{Window: time.Minute}) // one request a second
	p.Reserve(t0, "first", Normal, "a", Need{})                                                  // takes the bucket's 60
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
	p := New([]string{"a"}, map[string]Limits{"a": {TPM: 6000}}, t0, Options{Window: time.Minute}) // 100 tokens a second
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
	p := New([]string{"a"}, map[string]Limits{"a": {RPM: 1}}, t0, Options{Window: time.Minute})
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
			p := New([]string{"a"}, map[string]Limits{"a": {RPM: 60, TPM: 6000}}, t0, Options{Window: time.Minute})
			need := Need{Input: 1000, Output: 1000}
			p.Reserve(t0, "s", Normal, "a", need)
			if !p.Settle(t0, "s", tt.used) {
				t.Error("Settle = false, want the grant settled")
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

func TestPriorityOf(t *testing.T) {
	for in, want := range map[int32]Priority{0: Normal, 1: High, 2: Low, 3: Low, -1: Normal, 1 << 30: Low} {
		if got := PriorityOf(in); got != want {
			t.Errorf("PriorityOf(%d) = %v, want %v", in, got, want)
		}
	}
}

func TestBlockedKeysAreNotSwitchedTo(t *testing.T) {
	p := New([]string{"a", "b"}, map[string]Limits{"a": {RPM: 1}, "b": {RPM: 60}}, t0, Options{Window: time.Minute})
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
	p := New([]string{"a", "b"}, map[string]Limits{"a": {RPM: 60}, "b": {RPM: 60}}, t0, Options{StickyWait: -1, Window: time.Minute}) // two keys, a request a second each
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
	if got, ok := OutputBound(provider.NewScripted()); got != 0 || ok {
		t.Errorf("OutputBound of a provider that says none = %d, %v; want 0, false", got, ok)
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
