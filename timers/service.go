package timers

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/timeheap"
)

// Service owns the backoff timers of a runtime's sessions. A session's
// ArmTimer effect arms its one timer here (Arm) and its CancelTimer effect
// stops it (Cancel), whatever the session's state: live, the timer's
// Due goes to its actor; passivated (it leaves its actors while it
// waits), it goes by the session's id and starts the session again. A
// session on a store with durable timers also has its due time in its
// record: when its node is gone, a claim loop (ClaimDue) on any node opens
// it, and its core, resumed from the record, arms its timer here again.
//
// Arming and cancelling are calls, not messages, and a timer is a queue
// entry, not an actor or a clock timer of its own: a backoff costs one
// message (its Due) and a passivated session no actor. The entries wait
// in shards by session id, so that sessions arming at once rarely wait on
// one another; each shard keeps one queue ordered by due time under one
// clock timer armed for the earliest, and the entries due at the same
// instant go out together. On a virtual clock the shards' timers fire
// from Advance and what they deliver is counted in flight (Deliver), so
// the clock moves on only once the sessions have handled it.
type Service struct {
	clk     clock.Clock
	deliver Deliver
	origin  time.Time // due times are nanoseconds from it
	seed    maphash.Seed
	shards  [shardCount]shard
	claims  claimLoop
}

// Deliver sends due to the session sessionID, counting it in flight on
// the clock (internal/track): to its actor to, or, with to nil, by the
// session's id, starting its actor again. It is called from a shard's
// clock timer.
type Deliver func(sessionID string, to *actor.PID, due *Due)

// Due is what a timer delivers to its session when the backoff of the
// prompt Generation that Ticket names has passed (and the retry's continue
// after it). It never leaves the process: a plain Go value, counted in
// flight on the clock (a track.Message).
type Due struct {
	Generation, Ticket uint64
}

// Tracked marks Due as an actor message (track.Message).
func (*Due) Tracked() {}

// shardCount is how many shards a service has.
const shardCount = 8

// New returns a service on clk that hands the timers that fire to
// deliver.
func New(clk clock.Clock, deliver Deliver) *Service {
	s := &Service{clk: clk, deliver: deliver, origin: clk.Now(), seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i] = shard{svc: s, pending: newPendingTasks()}
	}
	return s
}

// Arm arms the backoff of generation's prompt that ticket names for the
// session sessionID, replacing the session's timer if it has one: after
// delay (at the clock's next instant when delay <= 0), Due{generation,
// ticket} goes to the session, to its actor to or, with to
// nil, by its id (see Deliver).
func (s *Service) Arm(sessionID string, to *actor.PID, delay time.Duration, generation, ticket uint64) {
	t := &task{session: sessionID, to: to}
	t.due.Generation, t.due.Ticket = generation, ticket
	s.shard(sessionID).add(t, int64(s.clk.Now().Add(max(delay, 0)).Sub(s.origin)))
}

// Cancel stops the session's timer if it is ticket's, or whichever it is
// with ticket 0.
func (s *Service) Cancel(sessionID string, ticket uint64) {
	s.shard(sessionID).cancel(sessionID, ticket)
}

// Pending is the number of timers armed and not yet fired or cancelled.
func (s *Service) Pending() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.pending.len()
		sh.mu.Unlock()
	}
	return n
}

// Close stops claiming (ClaimDue) and drops every timer.
func (s *Service) Close() {
	s.StopClaiming()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.pending.clear()
		sh.empty()
		sh.mu.Unlock()
	}
}

// shard is the shard of sessionID.
func (s *Service) shard(sessionID string) *shard {
	return &s.shards[maphash.String(s.seed, sessionID)%shardCount]
}

// shard holds the timers of some sessions, one each at most.
type shard struct {
	svc *Service

	mu      sync.Mutex
	pending pendingTasks
	// queue holds the pending tasks by due time, and the dropped ones
	// until they come up (or are half of it): a drop costs no queue
	// operation.
	queue   timeheap.Heap[*task]
	dropped int
	timer   clock.Timer // made with the first task, then reset
	armed   bool        // timer is set for armedAt
	armedAt int64
}

// task is a session's armed timer.
type task struct {
	session string
	key     uint64     // the hash of session in pendingTasks
	to      *actor.PID // nil: delivered by session id
	due     Due        // sent as is: one allocation with the task
	dropped bool       // replaced or cancelled
}

// add queues t at at, replacing its session's pending task.
func (sh *shard) add(t *task, at int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if p := sh.pending.get(t.session); p != nil {
		sh.drop(p)
	}
	sh.pending.put(t)
	sh.queue.Push(at, t)
	if !sh.armed || at < sh.armedAt {
		sh.arm(at)
	}
}

// cancel drops the pending task of session if it is ticket's (any, with
// ticket 0).
func (sh *shard) cancel(session string, ticket uint64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t := sh.pending.get(session); t != nil && (ticket == 0 || ticket == t.due.Ticket) {
		sh.drop(t)
	}
}

// drop removes t, pending: it stays in the queue, marked, until it comes
// up or the queue is compacted; with no task left the timer stops, so an
// idle shard keeps none armed (a virtual clock then has nothing to fire).
func (sh *shard) drop(t *task) {
	sh.pending.remove(t)
	t.dropped = true
	sh.dropped++
	switch {
	case sh.pending.len() == 0:
		sh.empty()
	case sh.dropped > 64 && 2*sh.dropped > sh.queue.Len():
		sh.queue.Keep(func(t *task) bool { return !t.dropped })
		sh.dropped = 0
	}
}

// empty clears the queue, which holds no pending task, and stops the
// timer.
func (sh *shard) empty() {
	sh.queue.Clear()
	sh.dropped = 0
	if sh.armed {
		sh.timer.Stop()
		sh.armed = false
	}
}

// arm sets the timer for at.
func (sh *shard) arm(at int64) {
	sh.armed, sh.armedAt = true, at
	d := sh.svc.origin.Add(time.Duration(at)).Sub(sh.svc.clk.Now())
	if sh.timer == nil {
		sh.timer = sh.svc.clk.AfterFunc(d, sh.fire)
		return
	}
	sh.timer.Reset(d)
}

// fire delivers the tasks due, outside the lock, a batch at a time.
func (sh *shard) fire() {
	var batch [8]*task // on the stack: takeDue fills it, never appends
	for more := true; more; {
		var n int
		n, more = sh.takeDue(&batch)
		for _, t := range batch[:n] {
			sh.svc.deliver(t.session, t.to, &t.due)
		}
	}
}

// takeDue fills batch with the tasks due, n of them, and reports whether
// more are due than it holds; once none is left due, it arms the timer
// for the next one. A timer that fired late (reset meanwhile, on the wall
// clock) finds nothing due, or the timer armed for the next task, and
// leaves it.
func (sh *shard) takeDue(batch *[8]*task) (n int, more bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := int64(sh.svc.clk.Now().Sub(sh.svc.origin))
	if sh.armed && sh.armedAt <= now {
		sh.armed = false // this firing is its
	}
	for sh.queue.Len() > 0 && sh.queue.Peek().Due <= now {
		if n == len(batch) {
			return n, true
		}
		t := sh.queue.Pop().Value
		if t.dropped {
			sh.dropped--
			continue
		}
		sh.pending.remove(t)
		batch[n] = t
		n++
	}
	if sh.pending.len() == 0 {
		sh.empty()
		return n, false
	}
	for sh.queue.Peek().Value.dropped { // the next pending task's time
		sh.queue.Pop()
		sh.dropped--
	}
	// A session may have armed it meanwhile (between batches), for later.
	if next := sh.queue.Peek().Due; !sh.armed || next < sh.armedAt {
		sh.arm(next)
	}
	return n, false
}
