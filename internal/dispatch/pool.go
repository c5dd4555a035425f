// Package dispatch runs protoactor mailboxes on a pool of long-lived
// worker goroutines instead of a fresh goroutine per mailbox activation.
//
// protoactor's default dispatcher starts a goroutine each time a mailbox
// gets work. Each starts on a small stack that MusePi's handlers (middleware,
// retry chain, protobuf) outgrow, so every activation pays for a stack copy:
// about a quarter of the CPU of a retry storm. Pool workers keep their grown
// stacks.
package dispatch

import (
	"sync"
)

// Pool is an actor.Dispatcher with a fixed set of workers and an unbounded
// FIFO of scheduled mailbox runs, so Schedule never blocks. It is safe for
// concurrent use.
type Pool struct {
	throughput int

	mu      sync.Mutex
	ready   *sync.Cond
	queue   []func()
	head    int
	closed  bool
	workers sync.WaitGroup
}

// NewPool starts workers goroutines; a mailbox run processes up to
// throughput messages before yielding its worker.
func NewPool(workers, throughput int) *Pool {
	p := &Pool{throughput: max(throughput, 1)}
	p.ready = sync.NewCond(&p.mu)
	workers = max(workers, 1)
	p.workers.Add(workers)
	for range workers {
		go p.work()
	}
	return p
}

// Schedule queues fn for a worker. After Close, fn runs on a goroutine of
// its own, as with protoactor's default dispatcher.
func (p *Pool) Schedule(fn func()) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		go fn()
		return
	}
	p.queue = append(p.queue, fn)
	p.mu.Unlock()
	p.ready.Signal()
}

// Throughput is how many messages a mailbox run may process.
func (p *Pool) Throughput() int { return p.throughput }

// Close lets the workers finish the queued runs, stops them and returns
// once they have exited.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ready.Broadcast()
	p.workers.Wait()
}

func (p *Pool) work() {
	defer p.workers.Done()
	for {
		fn, ok := p.next()
		if !ok {
			return
		}
		fn()
	}
}

// next waits for a queued run; false once the pool is closed and drained.
func (p *Pool) next() (func(), bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.head == len(p.queue) {
		if p.closed {
			return nil, false
		}
		p.ready.Wait()
	}
	fn := p.queue[p.head]
	p.queue[p.head] = nil
	p.head++
	switch {
	case p.head == len(p.queue): // drained: reuse the backing array
		p.queue, p.head = p.queue[:0], 0
	case p.head >= 1024 && p.head*2 >= len(p.queue): // never drained: drop the consumed half
		n := copy(p.queue, p.queue[p.head:])
		clear(p.queue[n:])
		p.queue, p.head = p.queue[:n], 0
	}
	return fn, true
}
