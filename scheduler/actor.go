package scheduler

import (
	"container/heap"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/mailbox"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
)

// Actor is a post-prompt scheduler: it answers ScheduleTask with TaskDue
// to the asking session at the due time (at once for a task due now), and
// Forget by dropping a session's pending task. A task without a sender (a
// session that leaves its actors while it waits) is delivered through
// wake, by session id. A session's newer generation makes its older tasks
// stale. A runtime runs several, sharded by session id, so that no one
// mailbox carries every session's continues.
//
// The pending tasks wait in one queue ordered by due time, under one clock
// timer armed for the earliest: a waiting session costs a queue entry, not
// a timer of its own, and the tasks due at the same instant go out
// together when that timer fires.
type Actor struct {
	clk  clock.Clock
	wake Wake
	root *actor.RootContext

	mu      sync.Mutex // the timer's goroutine delivers what falls due
	pending map[string]*task
	queue   taskQueue
	timer   clock.Timer // armed for the queue's head while it is not empty
	armedAt time.Time
}

// Wake delivers due to the session sessionID, starting its actor again if
// it left it; it is called from the timer's goroutine.
type Wake func(sessionID string, due *messages.TaskDue)

// task is a session's scheduled task.
type task struct {
	session string
	to      *actor.PID // nil: delivered through wake
	due     time.Time
	msg     *messages.TaskDue
	index   int // in the queue
}

// New returns the scheduler actor's producer state; wake (nil: tasks
// without a sender are dropped) delivers the tasks of sessions by id.
func New(clk clock.Clock, wake Wake) *Actor {
	return &Actor{clk: clk, wake: wake, pending: map[string]*task{}}
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
	case *actor.Started:
		a.root = ctx.ActorSystem().Root
	case *messages.ScheduleTask:
		a.schedule(ctx.Sender(), m)
	case *messages.Forget:
		a.mu.Lock()
		if t := a.pending[m.GetSessionId()]; t != nil && (m.GetToken() == 0 || m.GetToken() == t.msg.GetToken()) {
			a.drop(t)
		}
		a.mu.Unlock()
	case *actor.Stopping:
		a.mu.Lock()
		clear(a.pending)
		a.queue = nil
		a.disarm()
		a.mu.Unlock()
	}
}

// schedule queues the task of m for session; a task of an older
// generation than the session's pending one is stale and dropped, a newer
// one replaces it.
func (a *Actor) schedule(session *actor.PID, m *messages.ScheduleTask) {
	if session == nil && a.wake == nil {
		return
	}
	id, gen := m.GetSessionId(), m.GetGeneration()
	due := &messages.TaskDue{Generation: gen, Task: m.GetTask(), Token: m.GetToken()}
	delay := time.Duration(m.GetDelayMs())*time.Millisecond + time.Duration(m.GetSleepNs())
	a.mu.Lock()
	if p := a.pending[id]; p != nil {
		if gen < p.msg.GetGeneration() {
			a.mu.Unlock()
			return
		}
		a.drop(p)
	}
	if delay <= 0 { // due now: nothing to queue
		a.mu.Unlock()
		a.deliver(&task{session: id, to: session, msg: due})
		return
	}
	t := &task{session: id, to: session, due: a.clk.Now().Add(delay), msg: due}
	a.pending[id] = t
	heap.Push(&a.queue, t)
	if a.timer == nil || t.due.Before(a.armedAt) {
		a.arm(t.due)
	}
	a.mu.Unlock()
}

// drop removes t, pending, from the queue; with nothing left the timer
// stops, so an idle scheduler keeps none (a virtual clock then has nothing
// to fire). Called with mu held.
func (a *Actor) drop(t *task) {
	delete(a.pending, t.session)
	heap.Remove(&a.queue, t.index)
	if len(a.queue) == 0 {
		a.disarm()
	}
}

// arm sets the timer for at. Called with mu held.
func (a *Actor) arm(at time.Time) {
	a.disarm()
	a.armedAt = at
	a.timer = a.clk.AfterFunc(at.Sub(a.clk.Now()), a.fire)
}

// disarm stops the timer. Called with mu held.
func (a *Actor) disarm() {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}

// fire delivers the tasks due and arms the timer for the next one.
func (a *Actor) fire() {
	now := a.clk.Now()
	var due []*task
	a.mu.Lock()
	a.timer = nil
	for len(a.queue) > 0 && !a.queue[0].due.After(now) {
		t := heap.Pop(&a.queue).(*task)
		delete(a.pending, t.session)
		due = append(due, t)
	}
	if len(a.queue) > 0 {
		a.arm(a.queue[0].due)
	}
	a.mu.Unlock()
	for _, t := range due {
		a.deliver(t)
	}
}

// deliver sends t's TaskDue to its session.
func (a *Actor) deliver(t *task) {
	if t.to == nil {
		a.wake(t.session, t.msg)
		return
	}
	track.Send(a.root, a.clk, t.to, t.msg)
}
