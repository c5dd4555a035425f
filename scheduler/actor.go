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
// straight to the session; at once for a task due now, with no timer), and Forget by dropping a session's pending
// tasks. A session's newer generation makes its older tasks stale. A
// runtime runs several, sharded by session id, so that no one mailbox
// carries every session's continues.
type Actor struct {
	clk     clock.Clock
	pending map[string]*pendingTask // by session
}

// pendingTask is a session's scheduled task and its timer.
type pendingTask struct {
	generation uint64
	timer      clock.Timer
}

// New returns the scheduler actor's producer state.
func New(clk clock.Clock) *Actor {
	return &Actor{clk: clk, pending: map[string]*pendingTask{}}
}

// Props spawns a scheduler on clk; opts are added to the props.
func Props(clk clock.Clock, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return New(clk) },
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
	if session == nil {
		return
	}
	id, gen := m.GetSessionId(), m.GetGeneration()
	if p := a.pending[id]; p != nil {
		if gen < p.generation {
			return
		}
		p.timer.Stop()
	}
	task, token := m.GetTask(), m.GetToken()
	if m.GetDelayMs() <= 0 { // due now: no timer to keep
		delete(a.pending, id)
		track.Send(ctx, a.clk, session, &messages.TaskDue{Generation: gen, Task: task, Token: token})
		return
	}
	p := &pendingTask{generation: gen}
	a.pending[id] = p
	clk, root := a.clk, ctx.ActorSystem().Root
	p.timer = clk.AfterFunc(time.Duration(m.GetDelayMs())*time.Millisecond, func() {
		track.Send(root, clk, session, &messages.TaskDue{Generation: gen, Task: task, Token: token})
	})
}

func (a *Actor) drop(id string) {
	if p := a.pending[id]; p != nil {
		p.timer.Stop()
		delete(a.pending, id)
	}
}
