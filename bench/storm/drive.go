package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/testkit/memstat"
	"github.com/musepi/musepi/provider"
)

// contender is one system under test in a run: the peer or MusePi.
type contender interface {
	// setup prepares what must exist before the first prompt (MusePi's
	// runtime and sessions); its time is a figure of its own, and the
	// scenario's clock starts after it.
	setup(ctx context.Context) error
	// launch sends every session's prompt; it does not wait for them.
	launch(ctx context.Context) error
	// finished is the number of prompts completed or failed so far.
	finished() int
	// counts are the prompt and request counts once every prompt finished.
	counts() runCounts
	// close releases what launch started; it returns once all of it stopped.
	close() error
}

// runCounts is what a contender counted in a run.
type runCounts struct {
	completed, failed, requests int
	extra                       map[string]float64 // figures of its own
}

// measured is the run (from env.newRun) a contender runs on.
type measured struct {
	clk     clock.Clock
	rec     *recorder
	waves   *waves
	cleanup func() // the run's, called once the contender closed
	// restart starts the scenario's clock (its outage window) and the
	// run's measures again at now, once the contender is set up.
	restart func(now time.Time) error
}

// restartScenario starts the scenario of prov (in process, or the fake
// server's clock) and rec again at now.
func restartScenario(prov provider.Provider, rec *recorder, now time.Time) error {
	rec.restart(now)
	switch p := prov.(type) {
	case *scenarioProvider:
		p.start = now
	case *recordingProvider:
		if p.resetClock != nil {
			return p.resetClock()
		}
	}
	return nil
}

// drive runs one contender on the run prepared by e.newRun: it moves the
// virtual clock (or waits on the wall clock) until every prompt finished,
// samples CPU, memory (the heap per session while every session waits,
// Scenario.sampleAt) and goroutines, and turns it all into a System. The
// collections the memory sample forces are left out of the contender's
// CPU time: they are the harness's, and they cost a contender in
// proportion to its heap.
func drive(ctx context.Context, e *env, name, description string, m measured, c contender) (System, error) {
	sc := e.scenario
	// The memory a waiting session holds counts everything its contender
	// built for it, sessions included: measured from before the setup.
	baseline := memstat.InUse()
	setup0 := time.Now()
	if err := c.setup(ctx); err != nil {
		_ = c.close()
		m.cleanup()
		return System{}, fmt.Errorf("%s: setup: %w", name, err)
	}
	setup := time.Since(setup0)
	start := m.clk.Now()
	if err := m.restart(start); err != nil {
		_ = c.close()
		m.cleanup()
		return System{}, fmt.Errorf("%s: %w", name, err)
	}
	sampleAt, sampled := sc.sampleAt(e.sessions)
	bar := e.progress(name, e.sessions)
	bar.start()
	smp := startSampler()
	perWaiting := -1.0
	var sampleGC time.Duration // CPU of the sample's collections
	atSample := func() {
		if h, ok := c.(interface{ midOutage() }); ok {
			h.midOutage()
		}
		// The two collections' CPU (~1 s each at 100,000 MusePi sessions;
		// when a cycle of the contender's own is under way, runtime.GC
		// finishes it first, and its rest, a fraction of one cycle at
		// most, is left out too).
		gc0 := gcCPU()
		mem := memstat.InUse()
		sampleGC = gcCPU() - gc0
		if mem > baseline && sampled > 0 {
			perWaiting = float64(mem-baseline) / float64(sampled)
		}
		if e.heapProfile != "" {
			if perr := writeHeapProfile(e.heapProfile + "." + name); perr != nil {
				fmt.Fprintln(os.Stderr, "storm:", perr)
			}
		}
	}
	tick := func() { bar.set(c.finished()) }
	cpu0, wall0 := cpuTime(), time.Now()
	err := c.launch(ctx)
	if err == nil {
		if vc, ok := m.clk.(*clock.Virtual); ok {
			limit := sc.OutageStart + sc.OutageLen + time.Duration(e.settings.MaxRetries+1)*e.settings.MaxDelay
			err = advanceVirtual(ctx, vc, sampleAt, limit, func() bool { return c.finished() == e.sessions }, atSample, tick)
		} else {
			err = waitReal(ctx, start.Add(sampleAt), func() bool { return c.finished() == e.sessions }, atSample, tick)
		}
	}
	cpu, wall := cpuTime()-cpu0-sampleGC, time.Since(wall0)
	peak := smp.finish()
	tick()
	bar.stop()
	n := c.counts() // before close: MusePi asks its runtime
	if cerr := c.close(); err == nil && cerr != nil {
		err = cerr
	}
	m.cleanup()
	if err != nil {
		return System{}, fmt.Errorf("%s: %w", name, err)
	}
	runtime.GC()
	retries := n.requests - e.sessions
	outageFrom := start.Add(sc.OutageStart)
	outageTo := outageFrom.Add(sc.OutageLen)
	f := map[string]float64{
		"prompts_started":       float64(e.sessions),
		"prompts_completed":     float64(n.completed),
		"prompts_failed":        float64(n.failed),
		"prompts_lost":          float64(e.sessions - n.completed - n.failed),
		"requests_total":        float64(n.requests),
		"requests_outage":       float64(m.rec.requestsBetween(outageFrom, outageTo)),
		"retry_attempts":        float64(retries),
		"cpu_seconds":           cpu.Seconds(),
		"wall_seconds":          wall.Seconds(),
		"goroutines_after":      float64(runtime.NumGoroutine()),
		"setup_seconds":         setup.Seconds(),
		"sample_gc_cpu_seconds": sampleGC.Seconds(),
	}
	peak.figures(f)
	lockstep, byWave := m.waves.indexes(e.settings.BaseDelay)
	f["lockstep_index"] = lockstep
	for n, v := range byWave { // JSON only: the table shows the worst
		f[fmt.Sprintf("lockstep_wave_%d", n)] = v
	}
	for k, v := range n.extra {
		f[k] = v
	}
	if retries > 0 {
		f["attempts_per_cpu_second"] = float64(retries) / cpu.Seconds()
		f["cpu_us_per_attempt"] = float64(cpu.Microseconds()) / float64(retries)
		f["attempts_per_second"] = float64(retries) / wall.Seconds()
	}
	if perWaiting >= 0 {
		f["bytes_per_waiting_session"] = perWaiting
	}
	if last := m.rec.lastCompletion(); !last.IsZero() {
		f["drain_seconds"] = max(0, last.Sub(outageTo).Seconds())
	}
	f["retries_outage"] = f["requests_outage"] - float64(sc.firstAttemptsInOutage(e.sessions))
	if e.mode == "real" {
		all, first := m.rec.latenessFigures()
		nAll, nFirst := m.rec.latenessCounts()
		if nAll > 0 {
			f["lateness_p50_ms"] = durationMs(all[0])
			f["lateness_p99_ms"] = durationMs(all[1])
			f["lateness_max_ms"] = durationMs(all[2])
		}
		if nFirst > 0 {
			f["first_wave_lateness_p99_ms"] = durationMs(first[1])
		}
	}
	return System{Name: name, Description: description, Figures: f, Timeline: m.rec.timeline(100 * time.Millisecond)}, nil
}

// writeHeapProfile writes the live heap to file.
func writeHeapProfile(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	return f.Close()
}

// waitReal waits on the wall clock until done, calling atSample once at
// sample and tick every 100 ms.
func waitReal(ctx context.Context, sample time.Time, done func() bool, atSample, tick func()) error {
	sampleTimer := time.NewTimer(time.Until(sample))
	defer sampleTimer.Stop()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sampleTimer.C:
			atSample()
		case <-ticker.C:
			tick()
		}
	}
	return nil
}

// durationMs is d in milliseconds.
func durationMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
