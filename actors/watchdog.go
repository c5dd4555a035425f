package actors

import (
	"sync"
	"time"

	"github.com/musepi/musepi/clock"
)

// watchdog is a runtime's idle-stream watch: the turns streaming, checked
// by one timer every quarter of the idle time while any streams, instead
// of a timer per turn. A stream that sent nothing for the idle time is
// cancelled with errStreamStalled at the next check: between 1 and 1.25
// times the idle time after its last data.
type watchdog struct {
	clk   clock.Clock
	idle  time.Duration
	check func() // w.doCheck, made once: a method value costs an allocation each time it is taken

	mu    sync.Mutex
	turns turnList    // the turns streaming
	timer clock.Timer // made on first use, reset for each check
	armed bool        // the timer runs: turns is not empty
}

// turnList is a doubly linked list of turns through their prev and next
// fields: adding and removing a turn costs no hashing and no allocation.
type turnList struct {
	head *turnRun
	n    int
}

func (l *turnList) add(t *turnRun) {
	t.prev, t.next = nil, l.head
	if l.head != nil {
		l.head.prev = t
	}
	l.head = t
	l.n++
}

func (l *turnList) remove(t *turnRun) {
	if t.prev == nil && l.head != t {
		return // not in the list (removed by a check)
	}
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		l.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	}
	t.prev, t.next = nil, nil
	l.n--
}

func newWatchdog(clk clock.Clock, idle time.Duration) *watchdog {
	w := &watchdog{clk: clk, idle: idle}
	w.check = w.doCheck
	return w
}

// period is the time between checks.
func (w *watchdog) period() time.Duration { return max(w.idle/4, time.Millisecond) }

// add watches t, which has just started streaming.
func (w *watchdog) add(t *turnRun) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.turns.add(t)
	if !w.armed {
		w.arm()
	}
}

// arm runs the timer for the next check; w.mu is held.
func (w *watchdog) arm() {
	w.armed = true
	if w.timer == nil {
		w.timer = w.clk.AfterFunc(w.period(), w.check)
		return
	}
	w.timer.Reset(w.period())
}

// remove stops watching t; with no stream left the timer stops, so an
// idle runtime has none pending (a virtual clock then has nothing to fire).
func (w *watchdog) remove(t *turnRun) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.turns.remove(t)
	if w.turns.n == 0 && w.armed {
		w.timer.Stop()
		w.armed = false
	}
}

// doCheck cancels the streams quiet for the idle time and, while any is
// left, arms the next check.
func (w *watchdog) doCheck() {
	now := w.clk.Now().UnixNano()
	var stalled []*turnRun
	w.mu.Lock()
	for t := w.turns.head; t != nil; {
		next := t.next
		if now-t.lastData.Load() >= int64(w.idle) {
			stalled = append(stalled, t)
			w.turns.remove(t)
		}
		t = next
	}
	w.armed = false
	if w.turns.n > 0 {
		w.arm()
	}
	w.mu.Unlock()
	for _, t := range stalled {
		t.cancel(errStreamStalled)
	}
}
