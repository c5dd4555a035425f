package musepi_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// limitedHarness is a harness whose provider "p" has one key and an
// overload limit of one call in flight per model (unless opts set another
// limiter); session "a"'s turn holds the place (its stream runs until it
// is aborted).
func limitedHarness(t *testing.T, opts ...musepi.Option) (*harness, *musepi.Session, <-chan result) {
	t.Helper()
	creds := []musepi.Credential{{Name: "A", APIKey: "key-a", RateLimits: musepi.RateLimits{RPM: 1000}}}
	h := newHarnessCreds(t, creds, append([]musepi.Option{musepi.WithOverloadLimiter(overload.Settings{Max: 1})}, opts...)...)
	h.p.SetDefault(answer("ok"))
	h.p.SetScript("a", provider.Outcome{Block: true})
	a, _ := h.session(musepi.WithSessionID("a"))
	ch := h.prompt(a, "holds the place")
	waitFor(t, "a's call", func() bool { return len(h.p.Calls()) == 1 })
	return h, a, ch
}

// A turn that finds its model's limit full waits (capacity_wait), with
// pacing off and on (its reservation granted, then its place asked), and
// goes once a place frees.
func TestOverloadLimiterQueuesATurnUntilAPlaceFrees(t *testing.T) {
	for _, pacing := range []bool{false, true} {
		t.Run(map[bool]string{false: "unpaced", true: "paced"}[pacing], func(t *testing.T) {
			queuesUntilAPlaceFrees(t, pacing)
		})
	}
}

func queuesUntilAPlaceFrees(t *testing.T, pacing bool) {
	h, a, held := limitedHarness(t, musepi.WithPacing(pacing))
	b, rec := h.session()
	ch := h.prompt(b, "waits for a place")
	waitFor(t, "capacity_wait", func() bool { return rec.count("capacity_wait") == 1 })
	w := rec.ofType("capacity_wait")[0].(musepi.CapacityWait)
	if w.Provider != "p" || w.Model != "m" || w.Queued != 1 {
		t.Errorf("capacity_wait %+v; want p/m, 1 queued", w)
	}
	if n := len(h.p.Calls()); n != 1 {
		t.Fatalf("%d provider calls while the limit was full; want 1", n)
	}
	a.Abort() // its end frees the place: b goes
	h.run()
	if r := h.settle(held); r.err == nil {
		t.Error("the aborted prompt succeeded")
	}
	if r := h.settle(ch); r.err != nil {
		t.Fatalf("the queued prompt failed: %v", r.err)
	}
	if n := rec.count("auto_retry_start"); n != 0 {
		t.Errorf("a capacity wait counted as %d retries", n)
	}
}

func TestAbortEndsACapacityWait(t *testing.T) {
	for _, how := range []string{"abort", "abort_retry"} {
		t.Run(how, func(t *testing.T) {
			h, a, held := limitedHarness(t, musepi.WithPacing(false))
			b, rec := h.session()
			ch := h.prompt(b, "waits")
			waitFor(t, "capacity_wait", func() bool { return rec.count("capacity_wait") == 1 })
			if how == "abort" {
				b.Abort()
			} else {
				b.AbortRetry()
			}
			if r := h.settle(ch); r.err == nil {
				t.Fatal("the aborted prompt succeeded")
			}
			a.Abort()
			h.run()
			h.settle(held)
			if n := len(h.p.Calls()); n != 1 {
				t.Errorf("%d provider calls; want 1 (the aborted turn never went out)", n)
			}
		})
	}
}

// Runtime.ConcurrencyLimit reads a model's limit once a turn asked for
// it; nothing for a model never asked for, a selector without a provider,
// or a runtime without the limiter.
func TestConcurrencyLimitIsReadFromTheRuntime(t *testing.T) {
	h, a, held := limitedHarness(t)
	for _, c := range []struct {
		model string
		limit int
		ok    bool
	}{{"p/m", 1, true}, {"p/other", 0, false}, {"m", 0, false}, {"nope/m", 0, false}} {
		if n, ok := h.rt.ConcurrencyLimit(c.model); n != c.limit || ok != c.ok {
			t.Errorf("ConcurrencyLimit(%q) = %d, %v; want %d, %v", c.model, n, ok, c.limit, c.ok)
		}
	}
	a.Abort()
	h.run()
	h.settle(held)
	off := newHarness(t)
	if n, ok := off.rt.ConcurrencyLimit("p/m"); ok {
		t.Errorf("ConcurrencyLimit without the limiter = %d, true; want false", n)
	}
}

// A retry whose model and every fallback of its role are cooling down
// waits for the first of them to come back (capacity_wait with its
// delay), at most MaxQueueWait, instead of retrying into a cooling model
// every backoff; the wait is not a retry.
func TestARetryWaitsForACoolingModel(t *testing.T) {
	tests := []struct {
		name      string
		maxWait   time.Duration
		wantDelay time.Duration
		calls     int // to the provider, the answer included
	}{
		// p/m cools 75 s (an overload's 45 s and the nominal jitter's 30 s),
		// p/m2 from the fallback on, 1 ms later (its attempt's continue):
		// the wait ends as p/m comes back.
		{"until the primary comes back", 0, 75*time.Second - time.Millisecond, 3},
		{"at most MaxQueueWait", 20 * time.Second, 20 * time.Second, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			settings := retry.DefaultSettings()
			settings.FallbackChains = map[string][]string{"default": {"p/m2"}}
			creds := []musepi.Credential{{Name: "A", APIKey: "key-a"}}
			h := newHarnessCreds(t, creds, musepi.WithRetrySettings(settings),
				musepi.WithOverloadLimiter(overload.Settings{MaxQueueWait: tt.maxWait}))
			s, rec := h.session()
			overloaded := fail(529, `529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			h.p.SetScript(s.ID(), overloaded, overloaded, answer("back"))
			ch := h.prompt(s, "rides out the cooldown")
			h.run()
			if r := h.settle(ch); r.err != nil {
				t.Fatalf("prompt failed: %v", r.err)
			}
			waits := rec.ofType("capacity_wait")
			if len(waits) != 1 {
				t.Fatalf("%d capacity_wait events, want 1: %v", len(waits), rec.lines())
			}
			if w := waits[0].(musepi.CapacityWait); w.Delay != tt.wantDelay || w.Queued != 0 || w.Model != "m2" {
				t.Errorf("capacity_wait %+v, want a delay of %v on p/m2, none queued", w, tt.wantDelay)
			}
			if n := len(h.p.Calls()); n != tt.calls {
				t.Errorf("%d provider calls, want %d", n, tt.calls)
			}
			expectLines(t, rec.lines("auto_retry_start", "auto_retry_end"),
				"auto_retry_start 1/10 delay=0ms class=transient",
				fmt.Sprintf("auto_retry_start 2/10 delay=%dms class=transient", tt.wantDelay.Milliseconds()),
				"auto_retry_end success=true attempt=2")
		})
	}
}

// With HighPriorityFallback for its role, a high-priority turn that finds
// its model's limit full goes at once on a fallback of the same provider
// whose limit has room (a model change, reason capacity: no retry); a
// low-priority turn waits for its model.
func TestAHighPriorityTurnTakesAFallbackAtOnce(t *testing.T) {
	settings := retry.DefaultSettings()
	settings.FallbackChains = map[string][]string{"default": {"p/m2"}}
	h, a, held := limitedHarness(t, musepi.WithRetrySettings(settings),
		musepi.WithOverloadLimiter(overload.Settings{Max: 1, HighPriorityFallback: []string{"default"}}))
	high, highRec := h.session(musepi.WithPriority(musepi.High))
	low, lowRec := h.session(musepi.WithPriority(musepi.Low))
	chHigh := h.prompt(high, "cannot wait")
	if r := h.settle(chHigh); r.err != nil {
		t.Fatalf("the high-priority prompt failed: %v", r.err)
	}
	calls := h.p.Calls()
	if len(calls) != 2 || calls[1].Model != "m2" {
		t.Fatalf("calls %d, the second on %q; want 2, the second on the fallback m2", len(calls), calls[len(calls)-1].Model)
	}
	if n := highRec.count("capacity_wait") + highRec.count("auto_retry_start"); n != 0 {
		t.Errorf("the high-priority turn waited or retried (%d events)", n)
	}
	waitFor(t, "model_change", func() bool { return highRec.count("model_change") == 1 })
	expectLines(t, highRec.lines("model_change"), "model_change p/m -> p/m2 (capacity)")
	chLow := h.prompt(low, "waits for its model")
	waitFor(t, "capacity_wait", func() bool { return lowRec.count("capacity_wait") == 1 })
	if n := len(h.p.Calls()); n != 2 {
		t.Fatalf("%d provider calls: the low-priority turn did not wait", n)
	}
	a.Abort()
	h.run()
	h.settle(held)
	if r := h.settle(chLow); r.err != nil {
		t.Fatalf("the low-priority prompt failed: %v", r.err)
	}
	if got := h.p.Calls()[2].Model; got != "m" {
		t.Errorf("the low-priority turn went on %q, want its model m", got)
	}
}

// A provider without credentials gets its overload limiter too: its
// credentials actor keeps the places (and no key: the provider's own).
func TestOverloadLimiterWithoutCredentials(t *testing.T) {
	h := newHarness(t, musepi.WithOverloadLimiter(overload.Settings{Max: 1}))
	h.p.SetDefault(answer("ok"))
	h.p.SetScript("a", provider.Outcome{Block: true})
	a, _ := h.session(musepi.WithSessionID("a"))
	held := h.prompt(a, "holds the place")
	waitFor(t, "a's call", func() bool { return len(h.p.Calls()) == 1 })
	b, rec := h.session()
	ch := h.prompt(b, "waits for a place")
	waitFor(t, "capacity_wait", func() bool { return rec.count("capacity_wait") == 1 })
	if n, ok := h.rt.ConcurrencyLimit("p/m"); n != 1 || !ok {
		t.Errorf("ConcurrencyLimit = %d, %v; want 1, true", n, ok)
	}
	a.Abort()
	h.run()
	h.settle(held)
	if r := h.settle(ch); r.err != nil {
		t.Fatalf("the queued prompt failed: %v", r.err)
	}
	if c := h.p.Calls()[1]; c.Credential != "" || c.APIKey != "" {
		t.Errorf("the call went with credential %q key %q; want the provider's own", c.Credential, c.APIKey)
	}
}
