package actors

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
)

// DefaultQueueLen bounds each subscriber's queue of undelivered events.
const DefaultQueueLen = 4096

// Fanout delivers a session's events to its subscribers. Each subscriber has
// a bounded queue and is called from its own goroutine, started only while
// events are waiting, so a slow subscriber never blocks the session or the
// others.
//
// When a subscriber falls behind, what it misses is chosen by kind: streamed
// deltas (message_update) only fill the first queueLen places; the other
// events have a reserve of queueLen/4 (at least 16) more places and, when
// that is full too, push out a queued delta; terminal events (agent_end,
// auto_retry_end, agent_settled) are never dropped: once the reserve is
// full they push out a queued delta or other non-terminal event, or are
// queued beyond the bound when the queue holds nothing else (a subscriber
// that never reads keeps a few terminal events per prompt). A subscriber that missed events is told how many
// with an events_lost event, delivered before its next non-delta event (or
// once its queue is empty).
//
// A fan-out is two words: its FanoutConfig, shared, and its subscribers,
// an immutable list replaced on each change. With no subscriber it holds
// nothing more, and Publish and HasSubscribers allocate nothing. Its zero
// value needs Init before use; it must not be copied after.
type Fanout struct {
	cfg  *FanoutConfig
	subs atomic.Pointer[[]*subscriber] // nil or empty: none
}

// FanoutConfig is what the fan-outs of a runtime share: the clock their
// delivery goroutines count on, the logger of a subscriber's panic, the
// queue bound.
type FanoutConfig struct {
	clk      clock.Clock
	log      *slog.Logger
	queueLen int
	reserve  int
	// changes counts the subscriptions made and ended on the fan-outs of
	// this configuration, each once the subscribers have changed: while it
	// stands, whether a fan-out has subscribers stands too (listenCache).
	changes atomic.Uint64
}

// NewFanoutConfig returns the configuration of fan-outs with queueLen
// events per subscriber (<= 0: DefaultQueueLen).
func NewFanoutConfig(clk clock.Clock, log *slog.Logger, queueLen int) *FanoutConfig {
	if queueLen <= 0 {
		queueLen = DefaultQueueLen
	}
	return &FanoutConfig{clk: clk, log: log, queueLen: queueLen, reserve: max(queueLen/4, 16)}
}

// NewFanout returns a fan-out with queueLen events per subscriber (<= 0:
// DefaultQueueLen).
func NewFanout(clk clock.Clock, log *slog.Logger, queueLen int) *Fanout {
	f := &Fanout{}
	f.Init(NewFanoutConfig(clk, log, queueLen))
	return f
}

// Init readies a zero Fanout (one embedded in a larger struct) to deliver
// by cfg, before any other use.
func (f *Fanout) Init(cfg *FanoutConfig) { f.cfg = cfg }

// rank says what a full queue may drop: lower ranks go first.
type rank uint8

const (
	rankDelta    rank = iota // message_update: dropped first
	rankOrdinary             // agent_start, message_end, auto_retry_start, ...
	rankTerminal             // agent_end, auto_retry_end, agent_settled: never dropped
)

func rankOf(ev *messages.SessionEvent) rank {
	switch ev.GetEvent().(type) {
	case *messages.SessionEvent_MessageUpdate:
		return rankDelta
	case *messages.SessionEvent_AgentEnd, *messages.SessionEvent_AutoRetryEnd, *messages.SessionEvent_AgentSettled:
		return rankTerminal
	}
	return rankOrdinary
}

type subscriber struct {
	cfg     *FanoutConfig
	fn      func(*messages.SessionEvent)
	mu      sync.Mutex
	queue   []*messages.SessionEvent
	ranks   []rank
	dropOK  int // queued events of rank below terminal
	lost    uint64
	running bool
	closed  bool
}

// Subscribe registers fn; the returned function unsubscribes it. fn is
// called with events in order, never concurrently with itself.
func (f *Fanout) Subscribe(fn func(*messages.SessionEvent)) (unsubscribe func()) {
	s := &subscriber{cfg: f.cfg, fn: fn}
	f.update(func(subs []*subscriber) []*subscriber { return append(slices.Clip(subs), s) })
	return func() {
		f.update(func(subs []*subscriber) []*subscriber {
			return slices.DeleteFunc(slices.Clone(subs), func(o *subscriber) bool { return o == s })
		})
		s.mu.Lock()
		s.closed = true
		s.queue, s.ranks = nil, nil
		s.mu.Unlock()
	}
}

// update replaces the subscribers with change's list, made from the
// current one (which change must not modify).
func (f *Fanout) update(change func([]*subscriber) []*subscriber) {
	for {
		old := f.subs.Load()
		var subs []*subscriber
		if old != nil {
			subs = *old
		}
		next := change(subs)
		if f.subs.CompareAndSwap(old, &next) {
			f.cfg.changes.Add(1)
			return
		}
	}
}

// subscribers is the current list (nil: none).
func (f *Fanout) subscribers() []*subscriber {
	if p := f.subs.Load(); p != nil {
		return *p
	}
	return nil
}

// Flush waits until every subscriber has been called with every event
// published so far, or ctx ends (its error is returned).
func (f *Fanout) Flush(ctx context.Context) error {
	for {
		busy := false
		for _, s := range f.subscribers() {
			s.mu.Lock()
			busy = busy || s.running || len(s.queue) > 0
			s.mu.Unlock()
		}
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// listenCache tells whether a session's fan-outs (its own and the
// runtime-wide one) have subscribers, looking at their lists again only
// once a subscription was made or ended on their configurations: asking
// reads the configurations' counts, which the runtime's sessions share,
// not the session's fan-out or configuration, lines of their own.
type listenCache struct {
	events, all *Fanout
	configs     [2]*FanoutConfig
	changes     uint64 // the configurations' changes when it looked
	looked      bool
	answer      bool // whether they had subscribers when it looked
}

// watch has the cache answer for events and all (either may be nil).
func (c *listenCache) watch(events, all *Fanout) {
	*c = listenCache{events: events, all: all, configs: [2]*FanoutConfig{events.config(), all.config()}}
}

// listened reports whether the fan-outs watched have subscribers.
func (c *listenCache) listened() bool {
	n := c.configs[0].changeCount() + c.configs[1].changeCount() // before the lists: a change after it is seen next time
	if !c.looked || n != c.changes {
		c.changes, c.looked = n, true
		c.answer = c.events.HasSubscribers() || c.all.HasSubscribers()
	}
	return c.answer
}

// config is f's configuration (nil: f is nil).
func (f *Fanout) config() *FanoutConfig {
	if f == nil {
		return nil
	}
	return f.cfg
}

// changeCount is the subscriptions made and ended so far (nil: none).
func (c *FanoutConfig) changeCount() uint64 {
	if c == nil {
		return 0
	}
	return c.changes.Load()
}

// HasSubscribers reports whether anyone subscribes now.
func (f *Fanout) HasSubscribers() bool { return f != nil && len(f.subscribers()) > 0 }

// Publish queues ev for every subscriber.
func (f *Fanout) Publish(ev *messages.SessionEvent) {
	subs := f.subscribers()
	if len(subs) == 0 {
		return
	}
	r := rankOf(ev)
	for _, s := range subs {
		s.push(ev, r)
	}
}

func (s *subscriber) push(ev *messages.SessionEvent, r rank) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if !s.makeRoom(r) {
		s.lost++
		return
	}
	s.queue = append(s.queue, ev)
	s.ranks = append(s.ranks, r)
	if r < rankTerminal {
		s.dropOK++
	}
	if !s.running {
		s.running = true
		s.cfg.clk.Begin()
		go s.drain()
	}
}

// makeRoom reports whether an event of rank r may be queued, first pushing
// out a queued event of lower rank when the queue is full for r.
func (s *subscriber) makeRoom(r rank) bool {
	n := len(s.queue)
	switch {
	case r == rankDelta:
		return n < s.cfg.queueLen
	case n < s.cfg.queueLen+s.cfg.reserve:
		return true
	case s.evictBelow(r):
		return true
	}
	return r == rankTerminal
}

// evictBelow drops the oldest queued delta, else the oldest queued event of
// a rank below r, and reports whether it dropped one.
func (s *subscriber) evictBelow(r rank) bool {
	if s.dropOK == 0 {
		return false
	}
	victim := -1
	for i, qr := range s.ranks {
		if qr == rankDelta {
			victim = i
			break
		}
		if qr < r && victim < 0 {
			victim = i
		}
	}
	if victim < 0 {
		return false
	}
	s.queue = slices.Delete(s.queue, victim, victim+1)
	s.ranks = slices.Delete(s.ranks, victim, victim+1)
	s.dropOK--
	s.lost++
	return true
}

// drain delivers queued events until the queue is empty, then exits.
func (s *subscriber) drain() {
	defer s.cfg.clk.End()
	for {
		s.mu.Lock()
		if s.closed || len(s.queue) == 0 {
			s.running = false
			s.queue, s.ranks = nil, nil
			s.mu.Unlock()
			return
		}
		ev, r := s.queue[0], s.ranks[0]
		s.queue[0] = nil
		s.queue, s.ranks = s.queue[1:], s.ranks[1:]
		if r < rankTerminal {
			s.dropOK--
		}
		var before, after *messages.SessionEvent
		if s.lost > 0 && (r != rankDelta || len(s.queue) == 0) {
			notice := &messages.SessionEvent{SessionId: ev.GetSessionId(),
				Event: &messages.SessionEvent_EventsLost{EventsLost: &messages.EventsLost{Count: s.lost}}}
			s.lost = 0
			if r == rankDelta {
				after = notice
			} else {
				before = notice
			}
		}
		s.mu.Unlock()
		if before != nil {
			s.call(before)
		}
		s.call(ev)
		if after != nil {
			s.call(after)
		}
	}
}

// call runs the subscriber, containing a panic so that it harms no one else.
func (s *subscriber) call(ev *messages.SessionEvent) {
	defer func() {
		if r := recover(); r != nil {
			s.cfg.log.Error("subscriber panicked; event skipped", slog.Any("panic", r), slog.String("session", ev.GetSessionId()))
		}
	}()
	s.fn(ev)
}
