package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"syscall"
	"time"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// env is what every contender of one run shares: the same sessions, the
// same scenario, the same retry parameters.
type env struct {
	mode     string // "virtual" or "real" (cluster mode runs on the wall clock: "real")
	sessions int
	scenario *Scenario
	settings retry.Settings // base delay, max retries (jitter and cap are the policy's)
	// passivate is MusePi's WithPassivateAfter.
	passivate time.Duration
	seed      uint64
	// budgetCompared: MusePi runs twice, retry budget on and off.
	budgetCompared bool
	// db is the PostgreSQL server of cluster runs (nil without one).
	db *clusterDB
	// heapProfile, when set, is where each contender writes a heap profile
	// at mid-outage (suffixed with the contender's name).
	heapProfile string
	// newRun prepares one contender's run: a fresh clock standing at the
	// run's start (a *clock.Virtual in virtual mode), a recorder started at
	// that instant, a provider that answers by the scenario and records each
	// request in rec, and a cleanup to call when the run is over.
	newRun   func() (clk clock.Clock, prov provider.Provider, rec *recorder, cleanup func(), err error)
	progress func(label string, total int) *progress
}

// cpuTime is the CPU time (user + system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// gcCPU is the CPU time the garbage collector has used (runtime/metrics'
// estimate, brought up to date by each completed cycle).
func gcCPU() time.Duration {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(s[0].Value.Float64() * float64(time.Second))
}

// sampler follows the peaks of a run.
type sampler struct {
	stop  chan struct{}
	done  chan struct{}
	peaks peaks
}

// peaks are the largest heap (HeapAlloc), heap and goroutine stacks
// together (HeapAlloc+StackInuse: what a goroutine per session keeps on its
// stack counts too) and goroutine count a sampler saw.
type peaks struct {
	heap, memory uint64
	goroutines   int
}

// startSampler samples every 50 ms until stopped.
func startSampler() *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.peaks.heap = max(s.peaks.heap, ms.HeapAlloc)
	s.peaks.memory = max(s.peaks.memory, ms.HeapAlloc+ms.StackInuse)
	s.peaks.goroutines = max(s.peaks.goroutines, runtime.NumGoroutine())
}

// finish stops sampling and returns the peaks.
func (s *sampler) finish() peaks {
	close(s.stop)
	<-s.done
	s.sample()
	return s.peaks
}

// figures are the peaks as figures (see Figures).
func (p peaks) figures(f map[string]float64) {
	f["peak_heap_mb"] = float64(p.heap) / (1 << 20)
	f["peak_memory_mb"] = float64(p.memory) / (1 << 20)
	f["goroutines_peak"] = float64(p.goroutines)
}

// advanceVirtual runs a virtual-clock contender: it moves the clock in
// 100 ms steps until done reports true, calls atSample once when the clock
// has passed sample (with everything idle: every session is waiting), and
// reports progress. It fails if the clock passes limit with work left.
func advanceVirtual(ctx context.Context, clk *clock.Virtual, sample, limit time.Duration, done func() bool, atSample func(), tick func()) error {
	start := clk.Now()
	sampled := false
	for !done() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := clk.Advance(ctx, 100*time.Millisecond); err != nil {
			return err
		}
		elapsed := clk.Now().Sub(start)
		if !sampled && elapsed >= sample {
			sampled = true
			atSample()
		}
		tick()
		if elapsed > limit {
			return fmt.Errorf("virtual clock passed %v with prompts unfinished", limit)
		}
	}
	return nil
}
