package dispatch

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPoolRunsEveryScheduledRun(t *testing.T) {
	tests := []struct {
		name    string
		workers int
		runs    int
	}{
		{"one worker keeps order", 1, 100},
		{"many workers", 8, 10_000},
		{"queue compacts while never drained", 2, 50_000},
		{"zero workers means one", 0, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPool(tt.workers, 10)
			var (
				mu    sync.Mutex
				order []int
				wg    sync.WaitGroup
			)
			wg.Add(tt.runs)
			for i := range tt.runs {
				p.Schedule(func() {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					wg.Done()
				})
			}
			wg.Wait()
			p.Close()
			if len(order) != tt.runs {
				t.Fatalf("ran %d of %d", len(order), tt.runs)
			}
			if tt.workers == 1 {
				for i, v := range order {
					if v != i {
						t.Fatalf("run %d ran in position %d: one worker runs in FIFO order", v, i)
					}
				}
			}
		})
	}
}

func TestPoolCloseDrainsQueuedRuns(t *testing.T) {
	p := NewPool(1, 300)
	release := make(chan struct{})
	var ran atomic.Int32
	p.Schedule(func() { <-release; ran.Add(1) })
	for range 5 {
		p.Schedule(func() { ran.Add(1) })
	}
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
		t.Fatal("Close returned while a run was still going")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-done
	if n := ran.Load(); n != 6 {
		t.Errorf("ran %d runs, want all 6 queued before Close", n)
	}
}

func TestPoolScheduleAfterCloseStillRuns(t *testing.T) {
	p := NewPool(2, 300)
	p.Close()
	done := make(chan struct{})
	p.Schedule(func() { close(done) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a run scheduled after Close never ran")
	}
	if p.Throughput() != 300 {
		t.Errorf("Throughput = %d, want 300", p.Throughput())
	}
}

func TestPoolScheduleNeverBlocks(t *testing.T) {
	p := NewPool(1, 1)
	block := make(chan struct{})
	p.Schedule(func() { <-block })
	scheduled := make(chan struct{})
	go func() {
		for range 100_000 {
			p.Schedule(func() {})
		}
		close(scheduled)
	}()
	select {
	case <-scheduled:
	case <-time.After(10 * time.Second):
		t.Fatal("Schedule blocked while the only worker was busy")
	}
	close(block)
	p.Close()
}
