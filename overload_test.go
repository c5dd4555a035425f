package musepi_test

import (
	"testing"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/provider"
)

// limitedHarness is a harness whose provider "p" has one key and an
// overload limit of one call in flight per model; session "a"'s turn
// holds the place (its stream runs until it is aborted).
func limitedHarness(t *testing.T, opts ...musepi.Option) (*harness, *musepi.Session, <-chan result) {
	t.Helper()
	creds := []musepi.Credential{{Name: "A", APIKey: "key-a", RateLimits: musepi.RateLimits{RPM: 1000}}}
	h := newHarnessCreds(t, creds, append(opts, musepi.WithOverloadLimiter(overload.Settings{Max: 1}))...)
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
