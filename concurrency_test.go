package musepi_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/internal/testkit/soak"
)

// 10,000 sessions on one runtime all fail with a transient error at once,
// then recover, on the virtual clock: every Prompt returns, no event is lost
// or duplicated per session, no goroutine leaks (TestMain runs goleak).
// 1,000 sessions without -tags soak.
func TestTenThousandSessionsRideOutAnOutage(t *testing.T) {
	n := 1000
	if soak.Enabled {
		n = 10000
	}
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	h.p.SetDefault(fail(503, "503 Service Unavailable"), fail(429, "429 Too Many Requests", "retry-after", "2"), answer("ok"))

	sessions := make([]*musepi.Session, n)
	recs := make([]*recorder, n)
	for i := range sessions {
		sessions[i], recs[i] = h.session(musepi.WithSessionID(fmt.Sprintf("s%05d", i)))
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, err := s.Prompt(context.Background(), "hi")
			results[i] = result{msg, err}
		}()
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, s := range sessions {
		for s.Generation() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("sessions never took their prompts")
			}
			time.Sleep(time.Millisecond)
		}
	}
	h.runWithin(3 * time.Minute)
	wg.Wait()

	want := []string{
		"agent_end willRetry=true",
		"auto_retry_start 1/10 delay=500ms class=transient",
		"agent_end willRetry=true",
		"auto_retry_start 2/10 delay=2000ms class=transient",
		"agent_end willRetry=false",
		"auto_retry_end success=true attempt=2",
		"agent_settled success=true",
	}
	for i := range sessions {
		if results[i].err != nil {
			t.Fatalf("session %d: prompt error %v", i, results[i].err)
		}
		got := recs[i].lines(retryEvents...)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("session %d events:\n got %q\nwant %q", i, got, want)
		}
		seqs := recs[i].seqs()
		for j := range seqs {
			if seqs[j] != uint64(j+1) {
				t.Fatalf("session %d: event seqs %v are not 1..n without gaps", i, seqs)
			}
		}
	}
	if calls := len(h.p.Calls()); calls != 3*n {
		t.Fatalf("provider saw %d calls, want %d", calls, 3*n)
	}
}
