package dispatch

import "sync"

// Spawner runs functions that may block (a turn's provider stream, a
// tool) each on a goroutine of its own, as the go statement does, but
// reuses the goroutines that finished: a new goroutine starts on a small
// stack that a turn outgrows, so each would pay for a stack copy. Up to
// maxIdle finished goroutines wait for the next function; Close ends them.
// It is safe for concurrent use.
type Spawner struct {
	maxIdle int

	mu     sync.Mutex
	idle   []chan func() // the waiting goroutines, newest (warmest) last
	closed bool
}

// NewSpawner returns a spawner that keeps up to maxIdle goroutines
// waiting.
func NewSpawner(maxIdle int) *Spawner { return &Spawner{maxIdle: max(maxIdle, 0)} }

// Go runs fn on a waiting goroutine, or a new one. After Close it starts a
// goroutine that exits with fn.
func (s *Spawner) Go(fn func()) {
	s.mu.Lock()
	if n := len(s.idle); n > 0 {
		next := s.idle[n-1]
		s.idle[n-1] = nil
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		next <- fn // buffered: never blocks
		return
	}
	if s.closed {
		s.mu.Unlock()
		go fn()
		return
	}
	s.mu.Unlock()
	go s.run(fn)
}

// run runs fn, then the functions handed to it while it waits, until the
// spawner has enough waiting or closes.
func (s *Spawner) run(fn func()) {
	next := make(chan func(), 1)
	for fn != nil {
		fn()
		s.mu.Lock()
		if s.closed || len(s.idle) >= s.maxIdle {
			s.mu.Unlock()
			return
		}
		s.idle = append(s.idle, next)
		s.mu.Unlock()
		fn = <-next
	}
}

// Close ends the waiting goroutines; a function still running finishes on
// its goroutine, which then exits.
func (s *Spawner) Close() {
	s.mu.Lock()
	s.closed = true
	idle := s.idle
	s.idle = nil
	s.mu.Unlock()
	for _, next := range idle {
		next <- nil
	}
}
