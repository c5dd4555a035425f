package scheduler

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/mailbox"
	"github.com/musepi/musepi/internal/timeheap"
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
// together when that timer fires. The timer only sends the actor
// SchedulerTimer; the actor delivers what fell due, so all its state is
// its own goroutine's.
type Actor struct {
	clk  clock.Clock
	wake Wake
	root *actor.RootContext
	self *actor.PID

	pending pendingTasks
	// queue holds the pending tasks by due time (nanoseconds from origin),
	// and the dropped ones until they come up (or are half of it): a drop
	// costs no queue operation.
	queue   timeheap.Heap[*task]
	dropped int
	origin  time.Time
	timer   clock.Timer // armed for the queue's head while a task is pending
	armedAt int64
	fireFn  func() // the timer's call, as a value made once
}

// Wake delivers due to the session sessionID, starting its actor again if
// it left it; it is called from the scheduler's Receive.
type Wake func(sessionID string, due *messages.TaskDue)

// task is a session's scheduled task.
type task struct {
	session string
	key     uint64           // the hash of session in pendingTasks
	to      *actor.PID       // nil: delivered through wake
	due     messages.TaskDue // sent as is: one allocation with the task
	dropped bool             // replaced or forgotten
}

// New returns the scheduler actor's producer state; wake (nil: tasks
// without a sender are dropped) delivers the tasks of sessions by id.
func New(clk clock.Clock, wake Wake) *Actor {
	a := &Actor{clk: clk, wake: wake, pending: newPendingTasks(), origin: clk.Now()}
	a.fireFn = func() { track.Send(a.root, a.clk, a.self, timerFired) }
	return a
}

// Props spawns a scheduler on clk with wake (see New); opts are added to
// the props.
func Props(clk clock.Clock, wake Wake, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return New(clk, wake) },
		append([]actor.PropsOption{mailbox.Option(clk)}, opts...)...)
}

// timerFired is the message every scheduler's timer sends: it carries
// nothing, so one serves them all.
var timerFired = &messages.SchedulerTimer{}

// Receive handles ScheduleTask, Forget and its timer's SchedulerTimer.
func (a *Actor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.root, a.self = ctx.ActorSystem().Root, ctx.Self()
	case *messages.ScheduleTask:
		a.schedule(ctx.Sender(), m)
	case *messages.SchedulerTimer:
		a.fire()
	case *messages.Forget:
		if t := a.pending.get(m.GetSessionId()); t != nil && (m.GetToken() == 0 || m.GetToken() == t.due.GetToken()) {
			a.drop(t)
		}
	case *actor.Stopping:
		a.pending.clear()
		a.empty()
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
	t := &task{session: id, to: session}
	t.due.Generation, t.due.Task, t.due.Token = gen, m.GetTask(), m.GetToken()
	delay := time.Duration(m.GetDelayMs())*time.Millisecond + time.Duration(m.GetSleepNs())
	if p := a.pending.get(id); p != nil {
		if gen < p.due.GetGeneration() {
			return
		}
		a.drop(p)
	}
	if delay <= 0 { // due now: nothing to queue
		a.deliver(t)
		return
	}
	at := int64(a.clk.Now().Add(delay).Sub(a.origin))
	a.pending.put(t)
	a.queue.Push(at, t)
	if a.timer == nil || at < a.armedAt {
		a.arm(at)
	}
}

// drop removes t, pending: it stays in the queue, marked, until it comes
// up or the queue is compacted; with no task left the timer stops, so an
// idle scheduler keeps none (a virtual clock then has nothing to fire).
func (a *Actor) drop(t *task) {
	a.pending.remove(t)
	t.dropped = true
	a.dropped++
	switch {
	case a.pending.len() == 0:
		a.empty()
	case a.dropped > 64 && 2*a.dropped > a.queue.Len():
		a.queue.Keep(func(t *task) bool { return !t.dropped })
		a.dropped = 0
	}
}

// empty clears the queue, which holds no pending task, and stops the
// timer.
func (a *Actor) empty() {
	a.queue.Clear()
	a.dropped = 0
	a.disarm()
}

// arm sets the timer for at.
func (a *Actor) arm(at int64) {
	a.disarm()
	a.armedAt = at
	a.timer = a.clk.AfterFunc(a.origin.Add(time.Duration(at)).Sub(a.clk.Now()), a.fireFn)
}

// disarm stops the timer.
func (a *Actor) disarm() {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}

// fire delivers the tasks due and arms the timer for the next one.
func (a *Actor) fire() {
	now := int64(a.clk.Now().Sub(a.origin))
	for a.queue.Len() > 0 && a.queue.Peek().Due <= now {
		t := a.queue.Pop().Value
		if t.dropped {
			a.dropped--
			continue
		}
		a.pending.remove(t)
		a.deliver(t)
	}
	switch {
	case a.pending.len() == 0:
		a.empty()
	default:
		for a.queue.Peek().Value.dropped { // the next pending task's time
			a.queue.Pop()
			a.dropped--
		}
		// A timer stopped too late to keep it from firing finds the one
		// that replaced it armed for the next task, and leaves it.
		if next := a.queue.Peek().Due; a.timer == nil || next != a.armedAt {
			a.arm(next)
		}
	}
}

// deliver sends t's TaskDue to its session.
func (a *Actor) deliver(t *task) {
	if t.to == nil {
		a.wake(t.session, &t.due)
		return
	}
	track.Send(a.root, a.clk, t.to, &t.due)
}
