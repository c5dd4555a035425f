package scheduler

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
)

// Actor is the post-prompt scheduler of a runtime. Sessions register with
// their PID via Register before they schedule; it answers ScheduleTask with
// TaskDue at the due time, SetGeneration and DropTasks with GenerationIdle,
// and keeps one clock timer armed for the earliest task.
type Actor struct {
	clk      clock.Clock
	queue    *Queue
	sessions map[string]*actor.PID
	timer    clock.Timer
	armedAt  time.Time
}

// New returns the scheduler actor's producer state.
func New(clk clock.Clock) *Actor {
	return &Actor{clk: clk, queue: NewQueue(), sessions: map[string]*actor.PID{}}
}

// Props spawns a scheduler on clk; opts are added to the props.
func Props(clk clock.Clock, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return New(clk) },
		append([]actor.PropsOption{actor.WithReceiverMiddleware(track.Middleware(clk))}, opts...)...)
}

// Receive handles scheduler messages.
func (a *Actor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.ScheduleTask:
		if ctx.Sender() != nil {
			a.sessions[m.GetSessionId()] = ctx.Sender()
		}
		due := a.clk.Now().Add(time.Duration(max(m.GetDelayMs(), 0)) * time.Millisecond)
		if !a.queue.Add(Task{Session: m.GetSessionId(), Generation: m.GetGeneration(), Name: m.GetTask(), Due: due}) {
			a.tellIdle(ctx, m.GetSessionId(), m.GetGeneration())
		}
		a.arm(ctx)
	case *messages.SetGeneration:
		if ctx.Sender() != nil {
			a.sessions[m.GetSessionId()] = ctx.Sender()
		}
		a.queue.SetGeneration(m.GetSessionId(), m.GetGeneration())
		a.tellIdle(ctx, m.GetSessionId(), m.GetGeneration())
	case *messages.DropTasks:
		a.queue.drop(m.GetSessionId(), func(*Task) bool { return true })
		a.tellIdle(ctx, m.GetSessionId(), a.queue.generation[m.GetSessionId()])
	case *messages.Forget:
		a.queue.Drop(m.GetSessionId())
		delete(a.sessions, m.GetSessionId())
	case *messages.Tick:
		a.timer = nil
		a.fire(ctx)
		a.arm(ctx)
	}
}

// fire delivers every due task to its session.
func (a *Actor) fire(ctx actor.Context) {
	now := a.clk.Now()
	for {
		t, ok := a.queue.PopDue(now)
		if !ok {
			return
		}
		pid := a.sessions[t.Session]
		if pid == nil {
			continue
		}
		track.Send(ctx, a.clk, pid, &messages.TaskDue{
			Generation: t.Generation, Task: t.Name, Remaining: int32(a.queue.Pending(t.Session)),
		})
	}
}

// tellIdle tells session it has no task left, if so.
func (a *Actor) tellIdle(ctx actor.Context, session string, generation uint64) {
	if pid := a.sessions[session]; pid != nil && a.queue.Pending(session) == 0 {
		track.Send(ctx, a.clk, pid, &messages.GenerationIdle{Generation: generation})
	}
}

// arm keeps the timer set for the earliest due task.
func (a *Actor) arm(ctx actor.Context) {
	next, ok := a.queue.Next()
	if !ok {
		return
	}
	if a.timer != nil {
		if !next.Before(a.armedAt) {
			return
		}
		a.timer.Stop()
	}
	self, system := ctx.Self(), ctx.ActorSystem()
	a.armedAt = next
	a.timer = a.clk.AfterFunc(next.Sub(a.clk.Now()), func() {
		a.clk.Begin()
		system.Root.Send(self, &messages.Tick{})
	})
}
