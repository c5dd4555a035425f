package scheduler

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/mailbox"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
)

// Actor is a post-prompt scheduler: it answers ScheduleTask with TaskDue
// to the asking session at the due time (a clock timer whose firing goes
// straight to the session; at once for a task due now, with no timer), and
// Forget by dropping a session's pending tasks. A task without a sender
// (a session that leaves its actors while it waits) is delivered through
// wake, by session id. A session's newer generation makes its older tasks
// stale. A runtime runs several, sharded by session id, so that no one
// mailbox carries every session's continues.
type Actor struct {
	clk     clock.Clock
	wake    Wake
	pending map[string]*pendingTask // by session
}

// Wake delivers due to the session sessionID, starting its actor again if
// it left it; it is called from the timer's goroutine.
type Wake func(sessionID string, due *messages.TaskDue)

// pendingTask is a session's scheduled task and its timer.
type pendingTask struct {
	generation uint64
	timer      clock.Timer
}

// New returns the scheduler actor's producer state; wake (nil: tasks
// without a sender are dropped) delivers the tasks of sessions by id.
func New(clk clock.Clock, wake Wake) *Actor {
	return &Actor{clk: clk, wake: wake, pending: map[string]*pendingTask{}}
}

// Props spawns a scheduler on clk with wake (see New); opts are added to
// the props.
func Props(clk clock.Clock, wake Wake, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return New(clk, wake) },
		append([]actor.PropsOption{mailbox.Option(clk)}, opts...)...)
}

// Receive handles ScheduleTask and Forget.
func (a *Actor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.ScheduleTask:
		a.schedule(ctx, m)
	case *messages.Forget:
		a.drop(m.GetSessionId())
	case *actor.Stopping:
		for id := range a.pending {
			a.drop(id)
		}
	}
}

// schedule arms the task's timer; a task of an older generation than the
// session's pending one is stale and dropped, a newer one replaces it.
func (a *Actor) schedule(ctx actor.Context, m *messages.ScheduleTask) {
	session := ctx.Sender()
	if session == nil && a.wake == nil {
		return
	}
	id, gen := m.GetSessionId(), m.GetGeneration()
	if p := a.pending[id]; p != nil {
		if gen < p.generation {
			return
		}
		p.timer.Stop()
	}
	due := &messages.TaskDue{Generation: gen, Task: m.GetTask(), Token: m.GetToken()}
	clk, root, wake := a.clk, ctx.ActorSystem().Root, a.wake
	deliver := func() {
		if session == nil {
			wake(id, due)
			return
		}
		track.Send(root, clk, session, due)
	}
	delay := time.Duration(m.GetDelayMs())*time.Millisecond + time.Duration(m.GetSleepNs())
	if delay <= 0 { // due now: no timer to keep
		delete(a.pending, id)
		deliver()
		return
	}
	p := &pendingTask{generation: gen}
	a.pending[id] = p
	p.timer = clk.AfterFunc(delay, deliver)
}

func (a *Actor) drop(id string) {
	if p := a.pending[id]; p != nil {
		p.timer.Stop()
		delete(a.pending, id)
	}
}
