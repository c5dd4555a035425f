package actors

import (
	"sync"

	"github.com/rs/zerolog"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
)

// DefaultQueueLen bounds each subscriber's queue of undelivered events.
const DefaultQueueLen = 4096

// Fanout delivers a session's events to its subscribers. Each subscriber has
// a bounded queue and is called from its own goroutine, started only while
// events are waiting, so a slow subscriber never blocks the session or the
// others; on overflow it later receives an EventsLost event with the count.
type Fanout struct {
	clk      clock.Clock
	log      zerolog.Logger
	queueLen int

	mu   sync.Mutex
	subs map[uint64]*subscriber
	next uint64
}

// NewFanout returns a fan-out with queueLen events per subscriber (<= 0:
// DefaultQueueLen).
func NewFanout(clk clock.Clock, log zerolog.Logger, queueLen int) *Fanout {
	if queueLen <= 0 {
		queueLen = DefaultQueueLen
	}
	return &Fanout{clk: clk, log: log, queueLen: queueLen, subs: map[uint64]*subscriber{}}
}

type subscriber struct {
	f       *Fanout
	fn      func(*messages.SessionEvent)
	mu      sync.Mutex
	queue   []*messages.SessionEvent
	lost    uint64
	running bool
	closed  bool
}

// Subscribe registers fn; the returned function unsubscribes it. fn is
// called with events in order, never concurrently with itself.
func (f *Fanout) Subscribe(fn func(*messages.SessionEvent)) (unsubscribe func()) {
	f.mu.Lock()
	f.next++
	id := f.next
	s := &subscriber{f: f, fn: fn}
	f.subs[id] = s
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		delete(f.subs, id)
		f.mu.Unlock()
		s.mu.Lock()
		s.closed = true
		s.queue = nil
		s.mu.Unlock()
	}
}

// HasSubscribers reports whether anyone subscribes now.
func (f *Fanout) HasSubscribers() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs) > 0
}

// Publish queues ev for every subscriber.
func (f *Fanout) Publish(ev *messages.SessionEvent) {
	f.mu.Lock()
	subs := make([]*subscriber, 0, len(f.subs))
	for _, s := range f.subs {
		subs = append(subs, s)
	}
	f.mu.Unlock()
	for _, s := range subs {
		s.push(ev)
	}
}

func (s *subscriber) push(ev *messages.SessionEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if len(s.queue) >= s.f.queueLen {
		s.lost++
		return
	}
	s.queue = append(s.queue, ev)
	if !s.running {
		s.running = true
		s.f.clk.Begin()
		go s.drain()
	}
}

// drain delivers queued events until the queue is empty, then exits.
func (s *subscriber) drain() {
	defer s.f.clk.End()
	for {
		s.mu.Lock()
		if s.closed || len(s.queue) == 0 {
			s.running = false
			s.queue = nil
			s.mu.Unlock()
			return
		}
		ev := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		var lostNotice *messages.SessionEvent
		if s.lost > 0 && len(s.queue) == 0 {
			lostNotice = &messages.SessionEvent{SessionId: ev.GetSessionId(),
				Event: &messages.SessionEvent_EventsLost{EventsLost: &messages.EventsLost{Count: s.lost}}}
			s.lost = 0
		}
		s.mu.Unlock()
		s.call(ev)
		if lostNotice != nil {
			s.call(lostNotice)
		}
	}
}

// call runs the subscriber, containing a panic so that it harms no one else.
func (s *subscriber) call(ev *messages.SessionEvent) {
	defer func() {
		if r := recover(); r != nil {
			s.f.log.Error().Interface("panic", r).Str("session", ev.GetSessionId()).Msg("subscriber panicked; event skipped")
		}
	}()
	s.fn(ev)
}
