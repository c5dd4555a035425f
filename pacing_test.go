package musepi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// pacedHarness is a harness whose provider "p" has one key, A, limited to
// one request a minute, and answers every call.
func pacedHarness(t *testing.T, opts ...musepi.Option) *harness {
	t.Helper()
	h := newHarnessCreds(t, []musepi.Credential{{Name: "A", APIKey: "key-a", RateLimits: musepi.RateLimits{RPM: 1}}}, opts...)
	h.p.SetDefault(answer("ok"))
	return h
}

// spend sends one prompt on a new session (with opts) and waits for its
// answer: it spends the key's request of the minute.
func spend(t *testing.T, h *harness, opts ...musepi.SessionOption) {
	t.Helper()
	first, _ := h.session(opts...)
	h.run()
	if r := h.settle(h.prompt(first, "spends the minute's request")); r.err != nil {
		t.Fatal(r.err)
	}
}

// waitsOut sends a prompt on s, checks that it still waits 30 s later (the
// key has no request left for the minute), then that it is answered once
// the key refills.
func waitsOut(t *testing.T, h *harness, s *musepi.Session) {
	t.Helper()
	ch := h.prompt(s, "waits for the next request")
	h.advance(30 * time.Second)
	if !pending(ch) {
		t.Fatal("the prompt went out within the minute")
	}
	h.run()
	if r := h.settle(ch); r.err != nil {
		t.Fatalf("the paced prompt failed: %v", r.err)
	}
}

func TestPacingWaitsInsteadOfBeingRefused(t *testing.T) {
	h := pacedHarness(t)
	spend(t, h)
	s, rec := h.session()
	waitsOut(t, h, s)
	var waits []musepi.RateLimitWait
	for _, e := range rec.events {
		if w, ok := e.(musepi.RateLimitWait); ok {
			waits = append(waits, w)
		}
		if e.Type() == "auto_retry_start" {
			t.Errorf("a pacing wait counted as a retry: %v", e)
		}
	}
	if len(waits) != 1 || waits[0].Provider != "p" || waits[0].Credential != "A" || waits[0].Limit != "requests" ||
		waits[0].Delay != time.Minute {
		t.Errorf("rate_limit_wait events %+v; want one of 1m on p/A for requests", waits)
	}
	if n := len(h.p.Calls()); n != 2 {
		t.Errorf("%d provider calls; want 2 (no refused one)", n)
	}
}

func TestPacingReleasesByPriority(t *testing.T) {
	h := pacedHarness(t)
	spend(t, h)
	var order []string
	var chans []<-chan result
	for _, p := range []struct {
		name string
		prio musepi.Priority
	}{{"low", musepi.Low}, {"normal", musepi.Normal}, {"high", musepi.High}} {
		s, _ := h.session(musepi.WithPriority(p.prio), musepi.WithSessionID(p.name))
		chans = append(chans, h.prompt(s, p.name))
	}
	h.run()
	for _, c := range h.p.Calls()[1:] {
		order = append(order, c.SessionID)
	}
	for _, ch := range chans {
		if r := h.settle(ch); r.err != nil {
			t.Fatal(r.err)
		}
	}
	if fmt.Sprint(order) != "[high normal low]" {
		t.Errorf("calls went out in order %v; want [high normal low]", order)
	}
}

func TestAbortEndsAPacingWait(t *testing.T) {
	for _, how := range []string{"abort", "abort_retry"} {
		t.Run(how, func(t *testing.T) {
			h := pacedHarness(t)
			spend(t, h)
			s, _ := h.session()
			ch := h.prompt(s, "waits")
			h.advance(time.Second)
			if how == "abort" {
				s.Abort()
			} else {
				s.AbortRetry()
			}
			if r := h.settle(ch); r.err == nil {
				t.Fatal("the aborted prompt succeeded")
			}
			if n := len(h.p.Calls()); n != 1 {
				t.Errorf("%d provider calls; want 1 (the aborted turn never went out)", n)
			}
		})
	}
}

func TestSetPriorityTakesUnknownPrioritiesAsLow(t *testing.T) {
	h := newHarness(t)
	s, _ := h.session()
	for _, c := range []struct{ set, want musepi.Priority }{
		{musepi.High, musepi.High}, {musepi.Low + 1, musepi.Low}, {musepi.Normal, musepi.Normal}, {255, musepi.Low},
	} {
		if s.SetPriority(c.set); s.Priority() != c.want {
			t.Errorf("SetPriority(%d): Priority() = %v; want %v", c.set, s.Priority(), c.want)
		}
	}
}

func TestWithPriorityRefusesUnknownPriorities(t *testing.T) {
	h := newHarness(t)
	if _, err := h.rt.NewSession(t.Context(), musepi.WithModel("p/m"), musepi.WithPriority(musepi.Low+1)); err == nil {
		t.Error("NewSession with an unknown priority: no error")
	}
}

// announcing answers every call, announcing that the key has no request
// left for a minute (as a response's rate-limit headers say).
type announcing struct{ clk interface{ Now() time.Time } }

func (p announcing) Stream(context.Context, provider.Request, func(provider.Delta)) *messages.AssistantMessage {
	m := provider.Text("ok")
	limit, remaining := int64(1), int64(0)
	m.RateLimits = &messages.RateLimits{Requests: &messages.RateLimit{Limit: &limit, Remaining: &remaining,
		ResetUnixMs: p.clk.Now().Add(time.Minute).UnixMilli()}}
	return m
}

func (announcing) ResetSession(string) {}

func TestPacingLearnsTheLimitsResponsesAnnounce(t *testing.T) {
	h := newHarness(t) // its clock; the runtime is one with provider "a"
	ann := announcing{clk: h.clk}
	rt, err := musepi.NewRuntime(musepi.WithClock(h.clk), musepi.WithProvider("a", ann, musepi.Credential{Name: "A", APIKey: "key-a"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Shutdown(context.Background()) })
	h.rt = rt
	spend(t, h, musepi.WithModel("a/m")) // its answer says no request is left for a minute
	s, rec := h.session(musepi.WithModel("a/m"))
	waitsOut(t, h, s)
	if got := rec.lines("rate_limit_wait"); len(got) != 1 {
		t.Errorf("rate_limit_wait events %v; want one", got)
	}
}

// The metrics and the trace of a pacing wait: the wait's length by limit,
// what the key has left, the turns waiting, and the attempt span's
// musepi.pacing.wait_ms.
func TestPacingMetricsAndTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h, reader := meteredHarness(t, []musepi.Credential{{Name: "A", APIKey: "key-a", RateLimits: musepi.RateLimits{RPM: 1}}},
		musepi.WithTracerProvider(tp))
	h.p.SetDefault(answer("ok"))
	spend(t, h)
	s, _ := h.session()
	ch := h.prompt(s, "waits")
	h.advance(time.Second)
	expectLines(t, metricLines(t, reader, "musepi.pacing.waiting"),
		"musepi.pacing.waiting priority=high provider=p = 0",
		"musepi.pacing.waiting priority=low provider=p = 0",
		"musepi.pacing.waiting priority=normal provider=p = 1")
	h.run()
	h.settle(ch)
	expectLines(t, metricLines(t, reader, "musepi.pacing.wait", "musepi.ratelimit.remaining"),
		"musepi.pacing.wait limit=requests provider=p = count=1 sum=60",
		"musepi.ratelimit.remaining credential=A limit=requests provider=p = 0")
	var waited []string
	for _, sp := range exp.GetSpans() {
		if line := spanLine(sp, "musepi.pacing.wait_ms"); strings.Contains(line, "wait_ms") {
			waited = append(waited, line)
		}
	}
	if len(waited) != 1 || !strings.HasSuffix(waited[0], "musepi.pacing.wait_ms=60000") {
		t.Errorf("attempt spans with a pacing wait: %v; want one of 60000 ms", waited)
	}
}

// TestPacingRefusesATurnTooLargeForEveryKey: a turn that needs more
// tokens than every key may use in a minute is never sent and never
// retried: the prompt ends with an error naming the limit and the need
// (issue 37: such a request went out 11 times over 48 s).
func TestPacingRefusesATurnTooLargeForEveryKey(t *testing.T) {
	h := newHarnessCreds(t, []musepi.Credential{{Name: "A", APIKey: "key-a", RateLimits: musepi.RateLimits{TPM: 500}}})
	h.p.SetDefault(answer("ok"))
	s, rec := h.session()
	ch := h.prompt(s, "hi") // with no max_tokens it reserves the default output estimate, 1,024 tokens
	h.run()
	r := h.settle(ch)
	if r.err == nil || !strings.Contains(r.err.Error(), "more than any key") || !strings.Contains(r.err.Error(), "(key A: 500)") {
		t.Fatalf("prompt: %v; want the too-large error naming key A's 500", r.err)
	}
	if n := len(h.p.Calls()); n != 0 {
		t.Errorf("%d provider calls; want none", n)
	}
	for _, e := range rec.events {
		if e.Type() == "auto_retry_start" {
			t.Errorf("retried: %v", e)
		}
	}
}
