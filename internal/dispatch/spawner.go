package dispatch

import "sync"

// Task is work that may block (a turn's provider stream, a tool), run by
// a Spawner. A value that is its own task (a turn) costs no closure.
type Task interface {
	Run()
}

// Func is a function as a Task.
type Func func()

// Run calls f.
func (f Func) Run() { f() }

// Spawner runs tasks each on a goroutine of its own, as the go statement
// does, but reuses the goroutines that finished: a new goroutine starts on
// a small stack that a turn outgrows, so each would pay for a stack copy.
// Up to maxIdle finished goroutines wait for the next task; Close ends
// them. It is safe for concurrent use.
type Spawner struct {
	maxIdle int

	mu     sync.Mutex
	idle   []chan Task // the waiting goroutines, newest (warmest) last
	closed bool
}

// NewSpawner returns a spawner that keeps up to maxIdle goroutines
// waiting.
func NewSpawner(maxIdle int) *Spawner { return &Spawner{maxIdle: max(maxIdle, 0)} }

// Go runs t on a waiting goroutine, or a new one. After Close it starts a
// goroutine that exits with t.
func (s *Spawner) Go(t Task) {
	s.mu.Lock()
	if n := len(s.idle); n > 0 {
		next := s.idle[n-1]
		s.idle[n-1] = nil
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		next <- t // buffered: never blocks
		return
	}
	if s.closed {
		s.mu.Unlock()
		go t.Run()
		return
	}
	s.mu.Unlock()
	go s.run(t)
}

// run runs t, then the tasks handed to it while it waits, until the
// spawner has enough waiting or closes.
func (s *Spawner) run(t Task) {
	next := make(chan Task, 1)
	for t != nil {
		t.Run()
		s.mu.Lock()
		if s.closed || len(s.idle) >= s.maxIdle {
			s.mu.Unlock()
			return
		}
		s.idle = append(s.idle, next)
		s.mu.Unlock()
		t = <-next
	}
}

// Close ends the waiting goroutines; a task still running finishes on its
// goroutine, which then exits.
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
