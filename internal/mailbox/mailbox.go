// Package mailbox is the protoactor-go mailbox MusePi's actors run on.
//
// protoactor's own mailboxes allocate on every message: a queue node per
// message (the lock-free one), a method value each time the mailbox is
// scheduled, and an envelope per message for the receiver middleware that
// counted MusePi's messages on the clock. A session waiting in a retry
// storm pays for each of these on every attempt. This mailbox keeps its
// messages in a small ring under a mutex, binds its run function once, and
// ends each MusePi actor message (a track.Message) on the clock itself once the actor has
// handled it (what internal/track's Begin starts), so no envelope is built.
package mailbox

import (
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/track"
)

// Producer makes mailboxes that end protocol messages on clk.
func Producer(clk clock.Clock) actor.MailboxProducer {
	return func() actor.Mailbox {
		m := &Mailbox{clk: clk}
		m.runFn = m.process
		return m
	}
}

const (
	idle int32 = iota
	running
)

// Mailbox is an unbounded FIFO of user messages and one of system
// messages, run on the actor's dispatcher. It is safe for concurrent
// posting; one run at a time processes it.
type Mailbox struct {
	clk        clock.Clock
	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
	runFn      func() // process, bound once
	status     atomic.Int32

	mu        sync.Mutex
	suspended bool // touched by the run only
	// held counts protocol messages whose handler panicked: they stay in
	// flight on the clock until supervision has restarted or stopped the
	// actor, so a virtual clock does not move meanwhile. Run only.
	held   int32
	user   ring
	system ring // its buffer goes once drained: system messages are rare
	// userSlots is the user ring's buffer until it grows past it: a
	// session's message or two sit in the mailbox's own lines, not in an
	// allocation of their own that each post and take would read.
	userSlots [2]interface{}
}

// PostUserMessage queues a user message and schedules a run.
func (m *Mailbox) PostUserMessage(msg interface{}) {
	m.mu.Lock()
	if m.user.buf == nil {
		m.user.buf = m.userSlots[:]
	}
	m.user.push(msg)
	m.mu.Unlock()
	m.schedule()
}

// PostSystemMessage queues a system message and schedules a run.
func (m *Mailbox) PostSystemMessage(msg interface{}) {
	m.mu.Lock()
	m.system.push(msg)
	m.mu.Unlock()
	m.schedule()
}

// RegisterHandlers sets the actor the messages go to and its dispatcher.
func (m *Mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
}

// Start does nothing: the mailbox needs no start.
func (m *Mailbox) Start() {}

// UserMessageCount is the number of user messages waiting.
func (m *Mailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int(m.user.n)
}

func (m *Mailbox) schedule() {
	if m.status.CompareAndSwap(idle, running) {
		m.dispatcher.Schedule(m.runFn)
	}
}

// process runs the mailbox until it is empty (or suspended with only user
// messages left), looping when a message arrived as it went idle. After
// the dispatcher's throughput of messages it yields its worker: the run is
// scheduled again behind the other mailboxes'.
func (m *Mailbox) process() {
	for {
		if !m.run() {
			m.dispatcher.Schedule(m.runFn)
			return
		}
		m.status.Store(idle)
		m.mu.Lock()
		more := m.system.n > 0 || (!m.suspended && m.user.n > 0)
		m.mu.Unlock()
		if !more || !m.status.CompareAndSwap(idle, running) {
			return
		}
	}
}

// run handles up to the dispatcher's throughput of messages, system
// messages first, and reports whether it emptied the mailbox; a panic in a
// handler is escalated to the supervisor.
func (m *Mailbox) run() (emptied bool) {
	var msg interface{}
	protocol := false
	defer func() {
		if r := recover(); r != nil {
			if protocol {
				m.held++
			}
			m.invoker.EscalateFailure(r, msg)
			emptied = true // the escalation's messages schedule the next run
		}
	}()
	for range max(m.dispatcher.Throughput(), 1) {
		m.mu.Lock()
		var isSys, isUser bool
		if msg, isSys = m.system.pop(0); !isSys && !m.suspended {
			msg, isUser = m.user.pop(keptSlots)
		}
		m.mu.Unlock()
		switch {
		case isSys:
			m.handleSystem(msg)
		case isUser:
			protocol = track.Counted(unwrap(msg))
			m.invoker.InvokeUserMessage(msg)
			if protocol {
				protocol = false
				m.clk.End()
			}
		default:
			return true
		}
	}
	return false
}

// handleSystem handles one system message; once the actor is restarted,
// stopped or told of a child's end after a panic, the protocol messages
// held by the panic end.
func (m *Mailbox) handleSystem(msg interface{}) {
	switch msg.(type) {
	case *actor.SuspendMailbox:
		m.suspended = true
		return
	case *actor.ResumeMailbox:
		m.suspended = false
		return
	}
	m.invoker.InvokeSystemMessage(msg)
	switch msg.(type) {
	case *actor.Restart, *actor.Stop, *actor.Terminated:
		for ; m.held > 0; m.held-- {
			m.clk.End()
		}
	}
}

// unwrap is the message inside an envelope (a request's sender attached).
func unwrap(msg interface{}) interface{} {
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		return env.Message
	}
	return msg
}

// ring is a FIFO of messages in a ring buffer that grows by doubling. A
// buffer grown past the slots pop may keep is dropped once drained: a
// user ring grown by a burst (a scheduler shard's, say) past keptSlots,
// a system ring always; a session's user ring, which holds a message or
// two, keeps its two slots (the mailbox's own, userSlots).
type ring struct {
	buf     []interface{}
	head, n int32
}

// keptSlots is the largest buffer an emptied user ring keeps (4 KiB).
const keptSlots = 256

func (r *ring) push(msg interface{}) {
	size := int32(len(r.buf))
	if r.n == size {
		grown := make([]interface{}, max(2*size, 2))
		for i := range r.n {
			grown[i] = r.buf[(r.head+i)%size]
		}
		clear(r.buf) // it may be a mailbox's own slots, which stay
		r.buf, r.head, size = grown, 0, int32(len(grown))
	}
	r.buf[(r.head+r.n)%size] = msg
	r.n++
}

// pop takes the oldest message; an emptied ring keeps its buffer if it
// has at most keep slots.
func (r *ring) pop(keep int) (interface{}, bool) {
	if r.n == 0 {
		return nil, false
	}
	msg := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % int32(len(r.buf))
	r.n--
	if r.n == 0 {
		r.head = 0
		if len(r.buf) > keep {
			r.buf = nil
		}
	}
	return msg, true
}

// Option gives an actor this mailbox on clk: its protocol messages end on
// clk once handled.
func Option(clk clock.Clock) actor.PropsOption { return actor.WithMailbox(Producer(clk)) }
