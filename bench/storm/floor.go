package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/internal/testkit/memstat"
	"github.com/musepi/musepi/retry"
)

// The floor is protoactor-go's raw cost for the messages one retry attempt
// needs, with no retry logic at all: pairs of bare actors (a session-like
// actor and its child) bouncing one-way messages, and bare time.AfterFunc
// timers for the wake-up lateness.

// countdown is closed once n events have happened.
type countdown struct {
	left atomic.Int64
	done chan struct{}
}

func newCountdown(n int) *countdown {
	c := &countdown{done: make(chan struct{})}
	c.left.Store(int64(n))
	if n <= 0 {
		close(c.done)
	}
	return c
}

func (c *countdown) tick() {
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
}

// wait blocks until the countdown ends or ctx does.
func (c *countdown) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// floorPing is one message of a ping-pong chain. One value travels the
// whole chain, so sending it allocates nothing.
type floorPing struct {
	msgs     int // messages of this attempt still to send after this one
	attempts int // attempts of this pair still to run after this one
}

// floorArm makes a session actor start a long timer and report.
type floorArm struct{}

// floorWake is what the armed timer would send (it never fires).
type floorWake struct{}

// floorRun is the shared state of one floor run.
type floorRun struct {
	system     *actor.ActorSystem
	perAttempt int
	childProps *actor.Props
	ready      *countdown   // Started, both actors of every pair
	attempts   *countdown   // attempts finished
	armed      *countdown   // session actors holding a timer
	stopped    *countdown   // session actors stopped (their child first)
	pings      atomic.Int64 // attempt messages received, counted as they come
}

// floorActor is either actor of a pair.
type floorActor struct {
	run     *floorRun
	session bool
	head    *actor.PID // the session actor: each attempt's first message goes there
	other   *actor.PID // the other actor of the pair
	timer   *time.Timer
}

func (a *floorActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if a.session {
			a.head = ctx.Self()
			a.other = ctx.Spawn(a.run.childProps)
		} else {
			a.head = ctx.Parent()
			a.other = a.head
		}
		a.run.ready.tick()
	case *floorPing:
		a.run.pings.Add(1)
		if m.msgs > 0 {
			m.msgs--
			ctx.Send(a.other, m)
			return
		}
		a.run.attempts.tick()
		if m.attempts > 0 {
			m.msgs, m.attempts = a.run.perAttempt-1, m.attempts-1
			ctx.Send(a.head, m)
		}
	case floorArm:
		self, system := ctx.Self(), a.run.system
		a.timer = time.AfterFunc(time.Hour, func() { system.Root.Send(self, floorWake{}) })
		a.run.armed.tick()
	case *actor.Stopping:
		if a.timer != nil {
			a.timer.Stop()
		}
	case *actor.Stopped:
		if a.session {
			a.run.stopped.tick()
		}
	}
}

// runFloor spawns e.sessions pairs of bare actors and runs attempts
// attempts in all, spread over the pairs (each pair runs its attempts one
// after the other, the pairs concurrently), each attempt being
// msgsPerAttempt one-way messages bounced between the pair. It measures
// CPU and wall time per attempt, then the memory of a pair idle with one
// pending timer, and in real mode the lateness of bare timers.
func runFloor(ctx context.Context, e *env, msgsPerAttempt int, attempts int) (System, error) {
	msgsPerAttempt = max(1, msgsPerAttempt)
	attempts = max(0, attempts)
	pairs := e.sessions
	if pairs <= 0 {
		return System{}, fmt.Errorf("floor: need at least one session, got %d", pairs)
	}

	var bar *progress
	if e.progress != nil {
		bar = e.progress("floor", attempts)
		bar.start()
	}
	smp := startSampler()
	baseline := memstat.InUse()

	system := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }),
		actor.WithDeadLetterThrottleInterval(50*time.Millisecond),
	)
	run := &floorRun{
		system:     system,
		perAttempt: msgsPerAttempt,
		ready:      newCountdown(2 * pairs),
		attempts:   newCountdown(attempts),
		armed:      newCountdown(pairs),
		stopped:    newCountdown(pairs),
	}
	run.childProps = actor.PropsFromProducer(func() actor.Actor { return &floorActor{run: run} })
	sessionProps := actor.PropsFromProducer(func() actor.Actor { return &floorActor{run: run, session: true} })
	pids := make([]*actor.PID, pairs)
	for i := range pids {
		pids[i] = system.Root.Spawn(sessionProps)
	}
	// shutdown stops every pair, then the system; later calls do nothing.
	var shutdownOnce sync.Once
	shutdown := func() (err error) {
		shutdownOnce.Do(func() { err = stopFloor(system, pids, run.stopped) })
		return err
	}

	fail := func(err error) (System, error) {
		shutdown()
		smp.finish()
		if bar != nil {
			bar.stop()
		}
		return System{}, err
	}
	if err := run.ready.wait(ctx); err != nil {
		return fail(err)
	}

	// Attempts.
	cpu0, wall0 := cpuTime(), time.Now()
	for i, pid := range pids {
		n := attempts / pairs
		if i < attempts%pairs {
			n++
		}
		if n > 0 {
			system.Root.Send(pid, &floorPing{msgs: msgsPerAttempt - 1, attempts: n - 1})
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
wait:
	for {
		select {
		case <-run.attempts.done:
			break wait
		case <-ctx.Done():
			tick.Stop()
			return fail(ctx.Err())
		case <-tick.C:
			if bar != nil {
				bar.set(attempts - int(run.attempts.left.Load()))
			}
		}
	}
	tick.Stop()
	cpu, wall := cpuTime()-cpu0, time.Since(wall0)
	if bar != nil {
		bar.set(attempts)
	}

	// Idle pairs, each holding a pending timer.
	for _, pid := range pids {
		system.Root.Send(pid, floorArm{})
	}
	if err := run.armed.wait(ctx); err != nil {
		return fail(err)
	}
	perPair := 0.0
	if m := memstat.InUse(); m > baseline {
		perPair = float64(m-baseline) / float64(pairs)
	}

	if err := shutdown(); err != nil {
		smp.finish()
		if bar != nil {
			bar.stop()
		}
		return System{}, fmt.Errorf("floor: stopping the actors: %w", err)
	}

	var late [2][3]time.Duration
	if e.mode == "real" {
		var err error
		if late[0], late[1], err = timerLateness(ctx, pairs, e.settings.BaseDelay, retry.MaxBackoff); err != nil {
			return fail(err)
		}
	}
	peak := smp.finish()
	if bar != nil {
		bar.stop()
	}
	goroutinesAfter := runtime.NumGoroutine()

	f := map[string]float64{
		"wall_seconds":              wall.Seconds(),
		"bytes_per_waiting_session": perPair,
		"goroutines_after":          float64(goroutinesAfter),
	}
	peak.figures(f)
	if attempts > 0 {
		f["messages_per_attempt"] = float64(run.pings.Load()) / float64(attempts)
	}
	if attempts > 0 && cpu > 0 {
		f["cpu_us_per_attempt"] = float64(cpu.Microseconds()) / float64(attempts)
		f["attempts_per_cpu_second"] = float64(attempts) / cpu.Seconds()
	}
	if attempts > 0 && wall > 0 {
		f["attempts_per_second"] = float64(attempts) / wall.Seconds()
	}
	if e.mode == "real" {
		f["lateness_p50_ms"] = durationMs(late[0][0])
		f["lateness_p99_ms"] = durationMs(late[0][1])
		f["lateness_max_ms"] = durationMs(late[0][2])
		f["first_wave_lateness_p99_ms"] = durationMs(late[1][1])
	}
	return System{
		Name:        "floor",
		Description: fmt.Sprintf("protoactor-go alone: %d one-way messages per attempt between bare actor pairs; bare time.AfterFunc timers", msgsPerAttempt),
		Figures:     f,
	}, nil
}

// stopFloor stops every session actor (and so its child), waits for them,
// then shuts the system down.
func stopFloor(system *actor.ActorSystem, pids []*actor.PID, stopped *countdown) error {
	for _, pid := range pids {
		system.Root.Stop(pid)
	}
	// Stopping is quick; the timeout guards against a bug, not a slow run.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := stopped.wait(ctx)
	system.Shutdown()
	return err
}

// timerLateness starts n bare time.AfterFunc timers with first-wave delays
// (U[0.75, 1.0] × base, as MusePi's first retry) and n more spread
// uniformly over [0, spread), all at once, and measures how late each
// fires. It returns p50, p99 and max of all, and of the first wave.
func timerLateness(ctx context.Context, n int, base, spread time.Duration) (all, firstWave [3]time.Duration, err error) {
	rec := newRecorder(time.Now())
	var wg sync.WaitGroup
	timers := make([]*time.Timer, 0, 2*n)
	arm := func(d time.Duration, first bool) {
		wg.Add(1)
		due := time.Now().Add(d)
		timers = append(timers, time.AfterFunc(d, func() {
			defer wg.Done()
			rec.lateness(time.Since(due), first)
		}))
	}
	for range n {
		arm(retry.Backoff(1, base, rand.Float64()), true)
		arm(time.Duration(rand.Int64N(int64(max(spread, 1)))), false)
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		for _, t := range timers {
			if t.Stop() {
				wg.Done()
			}
		}
		<-done
		return all, firstWave, ctx.Err()
	}
	all, firstWave = rec.latenessFigures()
	return all, firstWave, nil
}
