package musepi_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// outageProvider fails every request with a 503 until the outage ends,
// then answers; it counts the requests made during the outage.
type outageProvider struct {
	clk      clock.Clock
	end      time.Time
	total    atomic.Int64
	inOutage atomic.Int64
}

func (p *outageProvider) Stream(ctx context.Context, _ provider.Request, _ func(provider.Delta)) *messages.AssistantMessage {
	p.total.Add(1)
	if p.clk.Now().Before(p.end) {
		p.inOutage.Add(1)
		return provider.Failure(503, "503 Service Unavailable", nil)
	}
	return provider.Text("ok")
}

func (p *outageProvider) ResetSession(string) {}

// stormResult is what one budget storm observed.
type stormResult struct {
	inOutage, total int64
	completed       int
	budgetDelayed   int // auto_retry_start events with budgetDelayMs > 0
	stats           retry.BudgetStats
	statsErr        error
}

// storm sends one prompt on each of n sessions into a 10 s outage on the
// virtual clock and runs until every prompt has settled.
func storm(t *testing.T, n int, budget bool) stormResult {
	t.Helper()
	clk := clock.NewVirtual(start)
	p := &outageProvider{clk: clk, end: start.Add(10 * time.Second)}
	s := noFallback()
	s.Budget.Enabled = budget
	rt, err := musepi.NewRuntime(musepi.WithClock(clk), musepi.WithProvider("p", p), musepi.WithRetrySettings(s), musepi.WithSeed(7))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	ctx := context.Background()
	var res stormResult
	var mu sync.Mutex
	for i := range n {
		sess, err := rt.NewSession(ctx, musepi.WithModel("p/m"), musepi.WithSessionID(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		sess.Subscribe(func(e musepi.Event) {
			if st, ok := e.(musepi.AutoRetryStart); ok && st.BudgetDelay > 0 {
				mu.Lock()
				res.budgetDelayed++
				mu.Unlock()
			}
		})
		sess.PromptAsync(ctx, "hi", func(_ *musepi.AssistantMessage, err error) {
			if err != nil {
				t.Errorf("session %d: %v", i, err)
				return
			}
			mu.Lock()
			res.completed++
			mu.Unlock()
		})
	}
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := clk.RunUntilIdle(runCtx); err != nil {
		t.Fatal(err)
	}
	res.stats, res.statsErr = rt.RetryBudget(ctx, "p")
	res.inOutage, res.total = p.inOutage.Load(), p.total.Load()
	return res
}

// TestRetryBudget is the storm protection of retry.budget: with it on, an
// outage costs the provider a fraction of the requests, no prompt is lost,
// held retries say so in auto_retry_start, and the budget drains after
// recovery.
func TestRetryBudget(t *testing.T) {
	const n = 40
	off := storm(t, n, false)
	on := storm(t, n, true)
	for name, r := range map[string]stormResult{"off": off, "on": on} {
		if r.completed != n {
			t.Errorf("budget %s: %d of %d prompts completed", name, r.completed, n)
		}
	}
	t.Logf("requests during the outage: budget off %d, on %d (total %d, %d)", off.inOutage, on.inOutage, off.total, on.total)
	if on.inOutage*2 > off.inOutage {
		t.Errorf("budget on sent %d requests during the outage, want at most half of budget off's %d", on.inOutage, off.inOutage)
	}
	if off.budgetDelayed != 0 || on.budgetDelayed == 0 {
		t.Errorf("auto_retry_start with budgetDelayMs > 0: off %d, on %d; want 0 and some", off.budgetDelayed, on.budgetDelayed)
	}
	if off.statsErr == nil {
		t.Error("RetryBudget with the budget off: want an error")
	}
	if on.statsErr != nil {
		t.Fatal(on.statsErr)
	}
	if on.stats.Delayed == 0 || on.stats.Released == 0 || on.stats.Held != 0 || !(on.stats.Tokens > 0) {
		t.Errorf("budget stats after the storm = %+v; want some delayed and released, none held, tokens refunded", on.stats)
	}
}
