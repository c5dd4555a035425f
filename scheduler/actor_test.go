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
	"github.com/musepi/musepi/internal/mailbox"
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
		p.got <- fmt.Sprintf("%v due gen=%d task=%s", at, m.GetGeneration(), m.GetTask())
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
	f.sched = system.Root.Spawn(scheduler.Props(clk, nil))
	f.probe = system.Root.Spawn(actor.PropsFromProducer(
		func() actor.Actor { return &probe{clk: clk, got: f.got} },
		mailbox.Option(clk)))
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

func schedule(gen uint64, delayMs int64, name string) *messages.ScheduleTask {
	return &messages.ScheduleTask{SessionId: "s", Generation: gen, DelayMs: delayMs, Task: name}
}

// sleep is a retry's continue after a backoff of token.
func sleep(gen, token uint64, backoff time.Duration, delayMs int64) *messages.ScheduleTask {
	return &messages.ScheduleTask{SessionId: "s", Generation: gen, Token: token, SleepNs: int64(backoff), DelayMs: delayMs, Task: "continue"}
}

func TestSchedulerActor(t *testing.T) {
	tests := []struct {
		name   string
		msgs   []*messages.ScheduleTask
		forget *messages.Forget
		want   []string
	}{
		{"a task is due after its delay", []*messages.ScheduleTask{schedule(1, 1000, "continue")}, nil,
			[]string{"1s due gen=1 task=continue"}},
		{"a task is due after its sleep and its delay", []*messages.ScheduleTask{sleep(1, 7, 2*time.Second, 1)}, nil,
			[]string{"2.001s due gen=1 task=continue"}},
		{"a negative delay is due at once", []*messages.ScheduleTask{schedule(1, -5, "continue")}, nil,
			[]string{"0s due gen=1 task=continue"}},
		{"a newer generation replaces the pending task", []*messages.ScheduleTask{schedule(1, 5000, "old"), schedule(2, 1000, "new")}, nil,
			[]string{"1s due gen=2 task=new"}},
		{"an older generation than the pending one is stale", []*messages.ScheduleTask{schedule(3, 1000, "new"), schedule(2, 500, "old")}, nil,
			[]string{"1s due gen=3 task=new"}},
		{"a task due now replaces the pending one", []*messages.ScheduleTask{schedule(1, 5000, "old"), schedule(2, 0, "now")}, nil,
			[]string{"0s due gen=2 task=now"}},
		{"Forget drops the pending task", []*messages.ScheduleTask{schedule(1, 1000, "continue")},
			&messages.Forget{SessionId: "s"}, nil},
		{"Forget with the task's token drops it", []*messages.ScheduleTask{sleep(1, 7, time.Second, 1)},
			&messages.Forget{SessionId: "s", Token: 7}, nil},
		{"Forget with another backoff's token leaves the task", []*messages.ScheduleTask{sleep(1, 7, time.Second, 1)},
			&messages.Forget{SessionId: "s", Token: 6}, []string{"1.001s due gen=1 task=continue"}},
		{"Forget of another session leaves the task", []*messages.ScheduleTask{schedule(1, 1000, "continue")},
			&messages.Forget{SessionId: "t"}, []string{"1s due gen=1 task=continue"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newSchedFixture(t)
			f.do(func(ctx actor.Context) {
				for _, m := range tt.msgs {
					track.Request(ctx, f.clk, f.sched, m)
				}
				if tt.forget != nil {
					track.Send(ctx, f.clk, f.sched, tt.forget)
				}
			})
			if got := f.runUntilIdle(t); !slices.Equal(got, tt.want) {
				t.Errorf("got\n\t%q\nwant\n\t%q", got, tt.want)
			}
		})
	}
}

// A task with no sender to answer is dropped; the others are unaffected.
func TestSchedulerActorUnknownSender(t *testing.T) {
	f := newSchedFixture(t)
	track.Send(f.system.Root, f.clk, f.sched, &messages.ScheduleTask{SessionId: "anon", Generation: 1, DelayMs: 1000, Task: "continue"})
	f.do(func(ctx actor.Context) { track.Request(ctx, f.clk, f.sched, schedule(1, 2000, "continue")) })
	want := []string{"2s due gen=1 task=continue"}
	if got := f.runUntilIdle(t); !slices.Equal(got, want) {
		t.Errorf("got\n\t%q\nwant\n\t%q", got, want)
	}
}

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// A task without a sender goes to wake, by session id, at its due time
// (its backoff and continue delay together).
func TestSchedulerActorWakesBySessionID(t *testing.T) {
	clk := clock.NewVirtual(t0)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	defer system.Shutdown()
	woken := make(chan string, 1)
	sched := system.Root.Spawn(scheduler.Props(clk, func(id string, due *messages.TaskDue) {
		woken <- fmt.Sprintf("%s %v due gen=%d token=%d", id, clk.Now().Sub(t0), due.GetGeneration(), due.GetToken())
	}))
	defer func() { _ = system.Root.StopFuture(sched).Wait() }()
	track.Send(system.Root, clk, sched, &messages.ScheduleTask{SessionId: "s", Generation: 2, Token: 7, Task: "continue",
		SleepNs: int64(30 * time.Second), DelayMs: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := clk.RunUntilIdle(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-woken:
		if want := "s 30.001s due gen=2 token=7"; got != want {
			t.Errorf("woke %q, want %q", got, want)
		}
	default:
		t.Fatal("the task never woke its session")
	}
}

// The tasks of many sessions wait in one queue under one clock timer, and
// go out in due order, those due at the same instant together.
func TestSchedulerActorQueuesUnderOneTimer(t *testing.T) {
	f := newSchedFixture(t)
	delays := []int64{3000, 1000, 2000, 1000, 5000}
	f.do(func(ctx actor.Context) {
		for i, d := range delays {
			track.Request(ctx, f.clk, f.sched, &messages.ScheduleTask{SessionId: fmt.Sprintf("s%d", i), Generation: uint64(i + 1), DelayMs: d, Task: "continue"})
		}
		// Another session's forgotten task leaves the queue.
		track.Send(ctx, f.clk, f.sched, &messages.Forget{SessionId: "s4"})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.clk.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.clk.Pending(); n != 1 {
		t.Errorf("%d clock timers pending for 4 tasks, want 1", n)
	}
	got := f.runUntilIdle(t)
	slices.Sort(got[:2]) // due at the same instant: either order
	want := []string{"1s due gen=2 task=continue", "1s due gen=4 task=continue", "2s due gen=3 task=continue", "3s due gen=1 task=continue"}
	if !slices.Equal(got, want) {
		t.Errorf("got\n\t%q\nwant\n\t%q", got, want)
	}
	if n := f.clk.Pending(); n != 0 {
		t.Errorf("%d clock timers pending with no task left, want 0", n)
	}
}

// Replaced and forgotten tasks never go out, however many there are (the
// queue drops them as they come up, or compacts past 64 of them).
func TestSchedulerActorReplacedAndForgotten(t *testing.T) {
	f := newSchedFixture(t)
	const sessions = 200
	f.do(func(ctx actor.Context) {
		for i := range sessions {
			id := fmt.Sprintf("s%03d", i)
			track.Request(ctx, f.clk, f.sched, &messages.ScheduleTask{SessionId: id, Generation: 1, DelayMs: 1000, Task: "old"})
			track.Request(ctx, f.clk, f.sched, &messages.ScheduleTask{SessionId: id, Generation: 2, DelayMs: int64(2000 + i), Task: "new"})
			if i%2 == 1 {
				track.Send(ctx, f.clk, f.sched, &messages.Forget{SessionId: id})
			}
		}
	})
	got := f.runUntilIdle(t)
	var want []string
	for i := 0; i < sessions; i += 2 {
		want = append(want, fmt.Sprintf("%v due gen=2 task=new", time.Duration(2000+i)*time.Millisecond))
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %d tasks\n\t%q\nwant %d\n\t%q", len(got), got, len(want), want)
	}
	if n := f.clk.Pending(); n != 0 {
		t.Errorf("%d clock timers pending with no task left, want 0", n)
	}
}
