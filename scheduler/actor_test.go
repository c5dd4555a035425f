package scheduler_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/scheduler"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// run is a step the probe runs inside its own actor context, so that the
// scheduler sees the probe as the sender. The test Begins it on the clock
// and the probe Ends it.
type run func(ctx actor.Context)

// probe stands in for a session: it runs steps and records what the
// scheduler sends it as lines "offset kind ...".
type probe struct {
	clk *clock.Virtual
	got chan<- string
}

func (p *probe) Receive(ctx actor.Context) {
	at := p.clk.Now().Sub(t0)
	switch m := ctx.Message().(type) {
	case run:
		defer p.clk.End()
		m(ctx)
	case *messages.TaskDue:
		p.got <- fmt.Sprintf("%v due gen=%d task=%s remaining=%d", at, m.GetGeneration(), m.GetTask(), m.GetRemaining())
	case *messages.GenerationIdle:
		p.got <- fmt.Sprintf("%v idle gen=%d", at, m.GetGeneration())
	}
}

// schedFixture is a scheduler and a probe on a virtual clock.
type schedFixture struct {
	clk    *clock.Virtual
	system *actor.ActorSystem
	sched  *actor.PID
	probe  *actor.PID
	got    chan string
}

func newSchedFixture(t *testing.T) *schedFixture {
	t.Helper()
	clk := clock.NewVirtual(t0)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	f := &schedFixture{clk: clk, system: system, got: make(chan string, 100)}
	f.sched = system.Root.Spawn(scheduler.Props(clk))
	f.probe = system.Root.Spawn(actor.PropsFromProducer(
		func() actor.Actor { return &probe{clk: clk, got: f.got} },
		actor.WithReceiverMiddleware(track.Middleware(clk))))
	t.Cleanup(func() {
		_ = system.Root.StopFuture(f.probe).Wait()
		_ = system.Root.StopFuture(f.sched).Wait()
		system.Shutdown()
	})
	return f
}

// do runs step in the probe's context.
func (f *schedFixture) do(step run) {
	f.clk.Begin()
	f.system.Root.Send(f.probe, step)
}

// runUntilIdle runs the clock dry and returns what the probe received.
func (f *schedFixture) runUntilIdle(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.clk.RunUntilIdle(ctx); err != nil {
		t.Fatalf("RunUntilIdle: %v", err)
	}
	var out []string
	for {
		select {
		case line := <-f.got:
			out = append(out, line)
		default:
			return out
		}
	}
}

// Protocol messages the probe sends to the scheduler.
func schedule(gen uint64, delayMs int64, name string) *messages.ScheduleTask {
	return &messages.ScheduleTask{SessionId: "s", Generation: gen, DelayMs: delayMs, Task: name}
}

func setGeneration(gen uint64) *messages.SetGeneration {
	return &messages.SetGeneration{SessionId: "s", Generation: gen}
}

func TestSchedulerActor(t *testing.T) {
	type msg = any // *messages.ScheduleTask, SetGeneration, DropTasks or Forget
	tests := []struct {
		name string
		send []msg
		want []string
	}{
		{"task due after its delay",
			[]msg{setGeneration(1), schedule(1, 1500, "continue")},
			[]string{"0s idle gen=1", "1.5s due gen=1 task=continue remaining=0"}},
		{"remaining counts down",
			[]msg{schedule(1, 2000, "b"), schedule(1, 1000, "a")},
			[]string{"1s due gen=1 task=a remaining=1", "2s due gen=1 task=b remaining=0"}},
		{"same instant in scheduling order",
			[]msg{schedule(1, 1000, "a"), schedule(1, 1000, "b")},
			[]string{"1s due gen=1 task=a remaining=1", "1s due gen=1 task=b remaining=0"}},
		{"zero and negative delays are due now",
			[]msg{schedule(1, -500, "neg"), schedule(1, 0, "zero")},
			[]string{"0s due gen=1 task=neg remaining=1", "0s due gen=1 task=zero remaining=0"}},
		{"SetGeneration makes a pending task stale",
			[]msg{schedule(1, 1000, "continue"), setGeneration(2)},
			[]string{"0s idle gen=2"}},
		{"SetGeneration to the pending task's generation keeps it",
			[]msg{schedule(2, 1000, "continue"), setGeneration(2)},
			[]string{"1s due gen=2 task=continue remaining=0"}},
		{"stale ScheduleTask answered with GenerationIdle",
			[]msg{setGeneration(3), schedule(2, 1000, "continue")},
			[]string{"0s idle gen=3", "0s idle gen=2"}},
		{"DropTasks drops and reports idle",
			[]msg{schedule(4, 1000, "continue"), &messages.DropTasks{SessionId: "s"}},
			[]string{"0s idle gen=4"}},
		{"Forget drops silently",
			[]msg{schedule(1, 1000, "continue"), &messages.Forget{SessionId: "s"}},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newSchedFixture(t)
			f.do(func(ctx actor.Context) {
				for _, m := range tt.send {
					switch m := m.(type) {
					case *messages.ScheduleTask:
						track.Request(ctx, f.clk, f.sched, m)
					case *messages.SetGeneration:
						track.Request(ctx, f.clk, f.sched, m)
					case *messages.DropTasks:
						track.Send(ctx, f.clk, f.sched, m)
					case *messages.Forget:
						track.Send(ctx, f.clk, f.sched, m)
					}
				}
			})
			if got := f.runUntilIdle(t); !slices.Equal(got, tt.want) {
				t.Errorf("got\n\t%q\nwant\n\t%q", got, tt.want)
			}
		})
	}
}

// An earlier task scheduled after a later one re-arms the timer; a new
// prompt generation in between drops the pending one.
func TestSchedulerActorAcrossSteps(t *testing.T) {
	f := newSchedFixture(t)
	f.do(func(ctx actor.Context) {
		track.Request(ctx, f.clk, f.sched, setGeneration(1))
		track.Request(ctx, f.clk, f.sched, schedule(1, 5000, "late"))
		track.Request(ctx, f.clk, f.sched, schedule(1, 1000, "early"))
	})
	want := []string{"0s idle gen=1"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.clk.Advance(ctx, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	want = append(want, "1s due gen=1 task=early remaining=1")

	f.do(func(ctx actor.Context) { track.Request(ctx, f.clk, f.sched, setGeneration(2)) })
	f.do(func(ctx actor.Context) { track.Request(ctx, f.clk, f.sched, schedule(2, 1000, "next")) })
	want = append(want, "1.5s idle gen=2", "2.5s due gen=2 task=next remaining=0")

	if got := f.runUntilIdle(t); !slices.Equal(got, want) {
		t.Errorf("got\n\t%q\nwant\n\t%q", got, want)
	}
	if got := f.clk.Now().Sub(t0); got != 2500*time.Millisecond {
		t.Errorf("clock at %v, want 2.5s (the stale task's timer re-armed for the next one)", got)
	}
}

// A task of a session that never told the scheduler its PID (no sender)
// is dropped when due; the others are unaffected.
func TestSchedulerActorUnknownSender(t *testing.T) {
	f := newSchedFixture(t)
	track.Send(f.system.Root, f.clk, f.sched, &messages.ScheduleTask{SessionId: "anon", Generation: 1, DelayMs: 1000, Task: "continue"})
	f.do(func(ctx actor.Context) { track.Request(ctx, f.clk, f.sched, schedule(1, 2000, "continue")) })
	want := []string{"2s due gen=1 task=continue remaining=0"}
	if got := f.runUntilIdle(t); !slices.Equal(got, want) {
		t.Errorf("got\n\t%q\nwant\n\t%q", got, want)
	}
}
