package musepi_test

import (
	"context"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// A subscriber that never returns blocks neither the session nor the other
// subscribers; its bounded queue drops deltas and then other events that do
// not fit, never a terminal one (agent_end, auto_retry_end, agent_settled),
// and once it runs again it is told how many events it lost. (On the wall clock: the virtual
// clock waits for every delivery by design.)
func TestSlowSubscriber(t *testing.T) {
	const queueLen, prompts = 16, 5 // each prompt's burst of events fits a queue; all of them do not
	p := provider.NewScripted(
		provider.Outcome{Message: provider.Failure(503, "503 Service Unavailable", nil)},
		provider.Outcome{Deltas: []provider.Delta{{Kind: "text", Text: "do"}, {Kind: "text", Text: "ne"}}, Message: provider.Text("done")})
	settings := noFallback()
	settings.BaseDelay = 10 * time.Millisecond
	rt, err := musepi.NewRuntime(musepi.WithProvider("p", p), musepi.WithRetrySettings(settings), musepi.WithEventQueueLen(queueLen),
		musepi.WithJitterSource(func() retry.Source { return nominal{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := rt.NewSession(ctx, musepi.WithModel("p/m"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	s.Subscribe(rec.add)
	release := make(chan struct{})
	got := make(chan musepi.Event, 100)
	s.Subscribe(func(e musepi.Event) {
		<-release // never returns until the test releases it
		got <- e
	})
	for i := 1; i <= prompts; i++ {
		if _, err := s.Prompt(ctx, "hi"); err != nil {
			t.Fatalf("prompt %d with a stuck subscriber: %v", i, err)
		}
		for len(rec.lines("agent_settled")) < i && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
	}
	lines := rec.lines(retryEvents...)
	if len(lines) < 5 || lines[1] != "auto_retry_start 1/10 delay=10ms class=transient" ||
		lines[3] != "auto_retry_end success=true attempt=1" || len(rec.lines("agent_settled")) != prompts {
		t.Fatalf("the other subscriber missed events: %q", lines)
	}
	total := rec.lastSeq() // seqs are gap-free from 1: the last one counts every event
	close(release)
	var delivered, lost uint64
	terminal := map[string]int{}
	for delivered+lost < total {
		select {
		case e := <-got:
			if l, ok := e.(musepi.EventsLost); ok {
				lost += l.Count
				continue
			}
			delivered++
			terminal[e.Type()]++
		case <-ctx.Done():
			t.Fatalf("delivered %d and lost %d of %d events", delivered, lost, total)
		}
	}
	// Deltas and then other events were dropped, never a terminal one: the
	// stuck subscriber got as many as the one that kept up.
	for _, typ := range []string{"agent_end", "auto_retry_end", "agent_settled"} {
		if want := len(rec.lines(typ)); terminal[typ] != want || want == 0 {
			t.Errorf("the stuck subscriber got %d %s events, the other %d", terminal[typ], typ, want)
		}
	}
	if lost == 0 || delivered+lost != total {
		t.Errorf("delivered %d + lost %d, want %d with some lost", delivered, lost, total)
	}
}

// Runtime.Shutdown cancels a pending backoff, and the history written before
// survives into a second runtime on the same directory.
func TestGracefulShutdownKeepsHistory(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithHistoryDir(dir))
	s, _ := h.session(musepi.WithSessionID("keep"))
	h.p.SetScript("keep", fail(429, "429 Too Many Requests", "retry-after", "60"))
	ch := h.prompt(s, "remember me")
	h.advance(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	h.settle(ch)

	h2 := newHarness(t, musepi.WithHistoryDir(dir))
	s2, _ := h2.session(musepi.WithSessionID("keep"))
	hist, err := s2.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].User == nil || hist[0].User.Text != "remember me" || hist[1].Assistant == nil || hist[1].Assistant.HTTPStatus != 429 {
		t.Fatalf("history after restart: %v", hist)
	}
	msgs, err := s2.Messages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].User == nil || msgs[0].User.Text != "remember me" {
		t.Fatalf("context after restart: %v (the failed turn stays out of it)", msgs)
	}
}
