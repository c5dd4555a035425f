package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/internal/testkit/soak"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/provider/openai"
	"github.com/musepi/musepi/retry"
)

// soakFaults are the models the chaos provider picks from at random for
// every call; the fake server answers each with its fault ("ok" answers).
var soakFaults = []fakellm.Rule{
	{Name: "429-hint", Match: fakellm.Match{Model: "429-hint"}, Respond: fakellm.Respond{Preset: "rate_limit", Headers: map[string]string{"retry-after-ms": "30"}}},
	{Name: "429-long-hint", Match: fakellm.Match{Model: "429-long-hint"}, Respond: fakellm.Respond{Preset: "rate_limit", Headers: map[string]string{"retry-after": "60"}}},
	{Name: "500", Match: fakellm.Match{Model: "500"}, Respond: fakellm.Respond{Preset: "server_error"}},
	{Name: "503", Match: fakellm.Match{Model: "503"}, Respond: fakellm.Respond{Preset: "unavailable"}},
	{Name: "overloaded", Match: fakellm.Match{Model: "overloaded"}, Respond: fakellm.Respond{Preset: "overloaded"}},
	{Name: "stall", Match: fakellm.Match{Model: "stall"}, Respond: fakellm.Respond{StallMs: 5000}},
	{Name: "cut", Match: fakellm.Match{Model: "cut"}, Respond: fakellm.Respond{Text: "Partial answer before the cut", Chunks: 4, CutAfter: fakellm.Int(2)}},
	{Name: "cut-early", Match: fakellm.Match{Model: "cut-early"}, Respond: fakellm.Respond{Text: "never seen", CutAfter: fakellm.Int(0)}},
	{Name: "refusal", Match: fakellm.Match{Model: "refusal"}, Respond: fakellm.Respond{Refusal: "I can't help with that."}},
	{Name: "usage-limit", Match: fakellm.Match{Model: "usage-limit"}, Respond: fakellm.Respond{Preset: "usage_limit", Headers: map[string]string{"retry-after-ms": "40"}}},
	{Name: "bad-request", Match: fakellm.Match{Model: "bad-request"}, Respond: fakellm.Respond{Status: 400, Message: "Invalid request"}},
}

// chaosProvider sends each call to a random fault model (or "ok", half the
// time) of the fake server, through a real SDK-based provider.
type chaosProvider struct {
	provider.Provider
	mu  sync.Mutex
	rnd *rand.Rand
}

func (c *chaosProvider) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta)) *messages.AssistantMessage {
	c.mu.Lock()
	req.Model = "ok"
	if c.rnd.IntN(2) == 0 {
		req.Model = soakFaults[c.rnd.IntN(len(soakFaults))].Match.Model
	}
	c.mu.Unlock()
	return c.Provider.Stream(ctx, req, onDelta)
}

// chainChecker checks a session's event stream as it arrives: each
// auto_retry_start is followed by the start of the next attempt or by
// exactly one auto_retry_end; attempts go up by one; agent_settled never
// comes while a chain is open.
type chainChecker struct {
	mu       sync.Mutex
	open     bool
	attempt  int
	settled  int
	checks   int
	problems []string
	recent   []string // the last events, for a report
}

// tail returns the last events seen.
func (c *chainChecker) tail() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.recent...)
}

func (c *chainChecker) add(e musepi.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks++
	if c.recent = append(c.recent, render(e)); len(c.recent) > 8 {
		c.recent = c.recent[1:]
	}
	bad := func(format string, args ...any) {
		c.problems = append(c.problems, fmt.Sprintf("event %d (%s): ", e.Header().Seq, e.Type())+fmt.Sprintf(format, args...))
	}
	switch p := e.(type) {
	case musepi.AutoRetryStart:
		want := 1
		if c.open {
			want = c.attempt + 1
		}
		if p.Attempt != want {
			bad("attempt %d, want %d", p.Attempt, want)
		}
		c.open, c.attempt = true, p.Attempt
	case musepi.AutoRetryEnd:
		switch {
		case c.open && p.Success && p.Attempt != c.attempt:
			bad("success at attempt %d after start %d", p.Attempt, c.attempt)
		case !c.open && (p.Success || p.Attempt > 1):
			bad("end (success %t, attempt %d) of a chain that never started", p.Success, p.Attempt)
		}
		c.open = false
	case musepi.AgentSettled:
		if c.open {
			bad("agent_settled while a retry chain is open")
		}
		c.settled++
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestSoak runs many sessions on the wall clock against the fake server with
// random faults (429s with hints, 5xx, overloads, stalls, cut streams,
// refusals, usage limits, bad requests) and random client actions (abort,
// abort_retry, set_auto_retry off and on, new prompts), checking the
// invariants throughout. 5 s by default; 90 s with -tags soak (which
// .ci/run runs); MUSEPI_SOAK_SECONDS and MUSEPI_SOAK_SESSIONS make it longer
// and wider.
func TestSoak(t *testing.T) {
	seconds := 5
	if soak.Enabled {
		seconds = 90
	}
	seconds = envInt("MUSEPI_SOAK_SECONDS", seconds)
	sessions := envInt("MUSEPI_SOAK_SESSIONS", 40)
	g0, h0 := runtime.NumGoroutine(), heapAlloc()

	srv := startServer(t, &fakellm.Scenario{Rules: soakFaults, Default: &fakellm.Respond{Text: "All good.", Chunks: 3}})
	// A plain client: the recording one of the other tests would keep every body.
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	inner := openai.New(openai.Config{BaseURL: srv.base + "/v1", API: openai.APIChat, HTTPClient: &http.Client{Transport: transport}})
	chaos := &chaosProvider{Provider: inner, rnd: rand.New(rand.NewPCG(1, 2))}
	settings := retry.DefaultSettings()
	settings.BaseDelay = 5 * time.Millisecond
	settings.MaxRetries = 4
	settings.MaxDelay = 2 * time.Second
	settings.ModelFallback = false
	rt, err := musepi.NewRuntime(
		musepi.WithProvider("chaos", chaos,
			musepi.Credential{Name: "a", APIKey: "key-a"}, musepi.Credential{Name: "b", APIKey: "key-b"}),
		musepi.WithRetrySettings(settings),
		musepi.WithStreamIdleTimeout(150*time.Millisecond),
		musepi.WithHistoryDir(t.TempDir()),
		musepi.WithLogger(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		t.Fatal(err)
	}

	var prompts, rejected, answered, failed atomic.Int64
	var peakHeap, peakGoroutines atomic.Uint64
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	checkers := make([]*chainChecker, sessions)
	handles := make([]*musepi.Session, sessions)
	promptsOf := make([]atomic.Int64, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		s, err := rt.NewSession(context.Background(), musepi.WithModel("chaos/any"), musepi.WithSessionID(fmt.Sprintf("soak-%03d", i)))
		if err != nil {
			t.Fatal(err)
		}
		checkers[i], handles[i] = &chainChecker{}, s
		s.Subscribe(checkers[i].add)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(i), 7))
			for time.Now().Before(deadline) {
				done := make(chan struct{})
				action, after := rnd.IntN(10), time.Duration(rnd.IntN(200))*time.Millisecond
				go func() { // a random client action while the prompt runs
					select {
					case <-time.After(after):
					case <-done:
						return
					}
					switch action {
					case 0:
						s.Abort()
					case 1:
						s.AbortRetry()
					case 2:
						s.SetAutoRetryEnabled(!s.AutoRetryEnabled())
					}
				}()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := s.Prompt(ctx, "hello")
				close(done)
				prompts.Add(1)
				switch {
				case err == nil:
					answered.Add(1)
					promptsOf[i].Add(1)
				case errors.Is(err, musepi.ErrBusy):
					rejected.Add(1)
				case ctx.Err() != nil:
					t.Errorf("session %d: a prompt did not resolve within 30 s; busy=%t retrying=%t; last events:\n  %s",
						i, s.Busy(), s.IsRetrying(), strings.Join(checkers[i].tail(), "\n  "))
					cancel()
					return
				default:
					failed.Add(1)
					promptsOf[i].Add(1)
				}
				cancel()
			}
		}()
	}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // peak figures, sampled while the soak runs
		defer close(sampled)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > peakHeap.Load() {
					peakHeap.Store(ms.HeapAlloc)
				}
				if g := uint64(runtime.NumGoroutine()); g > peakGoroutines.Load() {
					peakGoroutines.Store(g)
				}
			}
		}
	}()
	wg.Wait()
	close(stopSampling)
	<-sampled

	// Every prompt settled exactly once and every chain was well formed.
	checks := 0
	for i, c := range checkers {
		deadline := time.Now().Add(5 * time.Second)
		for {
			c.mu.Lock()
			settled := c.settled
			c.mu.Unlock()
			if int64(settled) >= promptsOf[i].Load() || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		c.mu.Lock()
		if c.settled != int(promptsOf[i].Load()) {
			t.Errorf("session %d: %d agent_settled for %d prompts", i, c.settled, promptsOf[i].Load())
		}
		for _, p := range c.problems {
			t.Errorf("session %d: %s", i, p)
		}
		checks += c.checks
		c.mu.Unlock()
	}
	// History never loses or duplicates an entry: sequence numbers run
	// 1..n, one user entry per prompt taken, and the context is
	// drawn from it.
	for i, s := range handles {
		hist, err := s.History(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		users := 0
		seqs := map[uint64]bool{}
		for j, e := range hist {
			if e.Seq != uint64(j+1) {
				t.Fatalf("session %d: history entry %d has seq %d", i, j, e.Seq)
			}
			seqs[e.Seq] = true
			if e.User != nil {
				users++
			}
		}
		if int64(users) != promptsOf[i].Load() {
			t.Errorf("session %d: %d user entries for %d prompts", i, users, promptsOf[i].Load())
		}
		msgs, err := s.Messages(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range msgs {
			if !seqs[e.Seq] {
				t.Errorf("session %d: context entry %d is not in the history", i, e.Seq)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	rt, handles, checkers = nil, nil, nil // let the heap check see what the runtime left
	stats := srv.Stats()
	faults := stats.Total - stats.ByRule["default"]
	var rules []string
	for name, n := range stats.ByRule {
		rules = append(rules, fmt.Sprintf("%s=%d", name, n))
	}
	sort.Strings(rules)
	// Goroutines and heap return to their baseline (the server and its
	// client close in cleanup; goleak checks the rest at the end).
	time.Sleep(100 * time.Millisecond)
	g1, h1 := runtime.NumGoroutine(), heapAlloc()
	t.Logf("soak: %d s, %d sessions, %d prompts (%d answered, %d failed, %d rejected busy), %d provider requests, %d faults injected %v, %d invariant checks, peak heap %.1f MB, goroutines %d before / %d peak / %d after, heap %.1f MB before / %.1f MB after",
		seconds, sessions, prompts.Load(), answered.Load(), failed.Load(), rejected.Load(), stats.Total, faults, rules, checks,
		float64(peakHeap.Load())/1e6, g0, peakGoroutines.Load(), g1, float64(h0)/1e6, float64(h1)/1e6)
	if answered.Load() == 0 || faults == 0 {
		t.Fatal("the soak injected no faults or answered nothing")
	}
	const heapMargin = 16 << 20
	if h1 > h0+heapMargin {
		t.Errorf("heap after the soak %.1f MB, more than %.1f MB above the %.1f MB baseline", float64(h1)/1e6, float64(heapMargin)/1e6, float64(h0)/1e6)
	}
}
