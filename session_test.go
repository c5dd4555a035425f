package musepi_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/retry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var retryEvents = []string{"auto_retry_start", "auto_retry_end", "agent_end", "agent_settled",
	"retry_fallback_applied", "retry_fallback_succeeded", "model_change", "compaction_required"}

func TestTransientErrorRetriedUntilSuccess(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), fail(503, "503 Service Unavailable"), answer("hello"))
	ch := h.prompt(s, "hi")
	h.run()
	r := h.settle(ch)
	if r.err != nil || r.msg.Text() != "hello" {
		t.Fatalf("prompt = %v, %v", r.msg, r.err)
	}
	expectLines(t, rec.lines(retryEvents...),
		"agent_end willRetry=true",
		"auto_retry_start 1/10 delay=500ms class=transient",
		"agent_end willRetry=true",
		"auto_retry_start 2/10 delay=1000ms class=transient",
		"agent_end willRetry=false",
		"auto_retry_end success=true attempt=2",
		"agent_settled success=true",
	)
}

// WithSessionRetrySettings: a session's own settings apply to it; settings
// the runtime cannot honour for one session are refused, never ignored.
func TestSessionRetrySettings(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	ctx := context.Background()

	one := noFallback()
	one.MaxRetries = 1
	s, rec := h.session(musepi.WithSessionRetrySettings(one))
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), fail(503, "503 Service Unavailable"))
	if r := h.runPrompt(s, "hi"); !errors.Is(r.err, musepi.ErrPromptFailed) {
		t.Fatalf("prompt error = %v", r.err)
	}
	expectLines(t, rec.lines("auto_retry_start", "auto_retry_end"),
		"auto_retry_start 1/1 delay=500ms class=transient",
		`auto_retry_end success=false attempt=1 error="503 Service Unavailable"`)

	chains := noFallback()
	chains.FallbackChains = map[string][]string{"default": {"p/m2"}}
	if _, err := h.rt.NewSession(ctx, musepi.WithModel("p/m"), musepi.WithSessionRetrySettings(chains)); err == nil ||
		!strings.Contains(err.Error(), "fallback chains are runtime-wide") {
		t.Errorf("own fallback chains: err = %v", err)
	}
	if _, err := h.rt.NewSession(ctx, musepi.WithModel("p/m"), musepi.WithSessionRetrySettings(retry.Settings{})); err == nil ||
		!strings.Contains(err.Error(), "settings are empty") {
		t.Errorf("zero settings: err = %v", err)
	}
}

// A prompt whose retry chain ended without success carries a *RetryError
// (errors.As) with the class, the attempt, the status and the final error;
// one whose chain recovered, or that never retried, carries none.
func TestRetryError(t *testing.T) {
	settings := noFallback()
	settings.MaxRetries = 2
	h := newHarness(t, musepi.WithRetrySettings(settings))
	s, _ := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), fail(503, "503 Service Unavailable"),
		fail(503, "503 Service Unavailable"), fail(401, "401 Unauthorized: invalid key"), answer("ok"))
	r := h.runPrompt(s, "exhaust the retries")
	var re *musepi.RetryError
	if !errors.Is(r.err, musepi.ErrPromptFailed) || !errors.As(r.err, &re) {
		t.Fatalf("prompt error = %v, want ErrPromptFailed with a *RetryError", r.err)
	}
	if re.Class != "transient" || re.Attempt != 2 || re.Status != 503 || re.FinalError != "503 Service Unavailable" {
		t.Errorf("RetryError = %+v", *re)
	}
	// Not retryable, no chain: no RetryError.
	r = h.runPrompt(s, "bad key")
	if !errors.Is(r.err, musepi.ErrPromptFailed) || errors.As(r.err, &re) {
		t.Errorf("prompt error = %v; want ErrPromptFailed without a *RetryError", r.err)
	}
}

// The runtime as a whole: its sessions, every session's events through
// one subscription, and what each session does now.
func TestRuntimeWideView(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	var mu sync.Mutex
	seen := map[string][]string{}
	unsubscribe := h.rt.Subscribe(func(ev musepi.Event) {
		mu.Lock()
		seen[ev.Header().SessionID] = append(seen[ev.Header().SessionID], ev.Type())
		mu.Unlock()
	})
	defer unsubscribe()
	waiting, _ := h.session(musepi.WithSessionID("b-waiting"))
	idle, _ := h.session(musepi.WithSessionID("a-idle"))
	h.p.SetScript(waiting.ID(), fail(429, "429 Too Many Requests", "retry-after", "30"), answer("late"))
	h.p.SetScript(idle.ID(), answer("hi"))
	if r := h.runPrompt(idle, "hi"); r.err != nil {
		t.Fatal(r.err)
	}
	ch := h.prompt(waiting, "wait")
	h.advance(time.Second)

	var ids []string
	for _, s := range h.rt.Sessions() {
		ids = append(ids, s.ID())
	}
	if strings.Join(ids, ",") != "a-idle,b-waiting" {
		t.Errorf("Sessions = %v", ids)
	}
	if s, ok := h.rt.Session("b-waiting"); !ok || s != waiting {
		t.Errorf("Session(b-waiting) = %v, %t", s, ok)
	}
	if _, ok := h.rt.Session("nobody"); ok {
		t.Error("Session(nobody) found")
	}
	st := h.rt.Stats()
	if st.Sessions != 2 || st.Busy != 1 || st.Retrying != 1 || st.ByPhase["backoff"] != 1 || st.ByPhase["idle"] != 1 {
		t.Errorf("Stats = %+v", st)
	}
	h.advance(31 * time.Second)
	if r := h.settle(ch); r.err != nil {
		t.Fatal(r.err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		done := slices.Contains(seen["b-waiting"], "agent_settled") && slices.Contains(seen["a-idle"], "agent_settled")
		a, b := strings.Join(seen["a-idle"], " "), strings.Join(seen["b-waiting"], " ")
		mu.Unlock()
		if done {
			if !strings.Contains(b, "auto_retry_start") || !strings.Contains(b, "auto_retry_end") || !strings.HasPrefix(a, "agent_start") {
				t.Errorf("events: a-idle %q, b-waiting %q", a, b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runtime-wide subscriber saw a-idle %q, b-waiting %q", a, b)
		}
		time.Sleep(time.Millisecond)
	}
}
