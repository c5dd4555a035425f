package mailbox

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/musepi/musepi/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// inFlight is a wall clock that counts the messages in flight.
type inFlight struct {
	clock.Real
	n atomic.Int64
}

func (c *inFlight) Begin() { c.n.Add(1) }
func (c *inFlight) End()   { c.n.Add(-1) }

// waitZero waits until nothing is in flight.
func (c *inFlight) waitZero(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.n.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d messages still in flight", c.n.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// numbered is a test's actor message (a track.Message), counted in flight.
type numbered struct{ n uint64 }

func (*numbered) Tracked() {}

// recorder keeps the numbers of the numbered messages it gets, and
// panics on number 0 (once per incarnation's first message).
type recorder struct {
	mu      *sync.Mutex
	got     *[]uint64
	started *atomic.Int32
}

func (r *recorder) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.started.Add(1)
	case *numbered:
		if m.n == 0 {
			panic("number 0")
		}
		r.mu.Lock()
		*r.got = append(*r.got, m.n)
		r.mu.Unlock()
	}
}

func newSystem(t *testing.T) *actor.ActorSystem {
	t.Helper()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	t.Cleanup(system.Shutdown)
	return system
}

func spawnRecorder(t *testing.T, system *actor.ActorSystem, clk clock.Clock) (*actor.PID, *recorder) {
	t.Helper()
	r := &recorder{mu: &sync.Mutex{}, got: new([]uint64), started: new(atomic.Int32)}
	pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return r }, Option(clk)))
	t.Cleanup(func() { _ = system.Root.StopFuture(pid).Wait() })
	return pid, r
}

func TestMessagesArriveInOrderAndEndOnTheClock(t *testing.T) {
	clk := &inFlight{}
	system := newSystem(t)
	pid, r := spawnRecorder(t, system, clk)
	const n = 5000
	var senders sync.WaitGroup
	for g := range 4 { // four senders, each in its own order
		senders.Add(1)
		go func() {
			defer senders.Done()
			for i := range n {
				clk.Begin()
				system.Root.Send(pid, &numbered{n: uint64(g*n + i + 1)})
			}
		}()
	}
	senders.Wait()
	clk.waitZero(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(*r.got) != 4*n {
		t.Fatalf("got %d messages, want %d", len(*r.got), 4*n)
	}
	last := map[uint64]uint64{}
	for _, gen := range *r.got {
		sender := (gen - 1) / n
		if gen <= last[sender] {
			t.Fatalf("sender %d: %d after %d", sender, gen, last[sender])
		}
		last[sender] = gen
	}
}

func TestNonProtocolMessagesAreNotEnded(t *testing.T) {
	clk := &inFlight{}
	system := newSystem(t)
	pid, _ := spawnRecorder(t, system, clk)
	clk.Begin() // one protocol message in flight, which never comes
	system.Root.Send(pid, "not a protocol message")
	// Touch is answered once the messages before it are handled.
	if _, err := system.Root.RequestFuture(pid, &actor.Touch{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	if got := clk.n.Load(); got != 1 {
		t.Fatalf("in flight = %d, want 1 (a non-protocol message must not end one)", got)
	}
	clk.End()
}

func TestPanicHoldsTheMessageUntilRestarted(t *testing.T) {
	clk := &inFlight{}
	system := newSystem(t)
	pid, r := spawnRecorder(t, system, clk)
	clk.Begin()
	system.Root.Send(pid, &numbered{n: 0}) // panics
	clk.Begin()
	system.Root.Send(pid, &numbered{n: 7})
	clk.waitZero(t)
	if got := r.started.Load(); got != 2 {
		t.Fatalf("started %d times, want 2 (restarted once)", got)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(*r.got) != 1 || (*r.got)[0] != 7 {
		t.Fatalf("got %v, want [7] after the restart", *r.got)
	}
}

func TestRing(t *testing.T) {
	var r ring
	next, want := 0, 0
	for round := range 50 { // grow, wrap around, drain, shrink
		for range round % 13 {
			r.push(next)
			next++
		}
		for range round % 7 {
			got, ok := r.pop(keptSlots)
			if want == next {
				if ok {
					t.Fatalf("pop from an empty ring gave %v", got)
				}
				break
			}
			if !ok || got.(int) != want {
				t.Fatalf("pop = %v, %v; want %d", got, ok, want)
			}
			want++
		}
	}
	for want < next {
		got, _ := r.pop(keptSlots)
		if got.(int) != want {
			t.Fatalf("pop = %v, want %d", got, want)
		}
		want++
	}
	if len(r.buf) > keptSlots {
		t.Fatalf("an emptied ring keeps %d slots, want at most %d", len(r.buf), keptSlots)
	}
	r.push(next)
	if got, _ := r.pop(0); got.(int) != next || r.buf != nil {
		t.Fatalf("pop(0) = %v, leaving %d slots; want %d and none", got, len(r.buf), next)
	}
}

// A ring on a mailbox's own slots keeps its order when it grows past them,
// and leaves no message behind in them.
func TestRingGrowsPastItsSlots(t *testing.T) {
	var slots [2]interface{}
	r := ring{buf: slots[:]}
	for i := range 5 {
		r.push(i)
	}
	if slots != [2]interface{}{} {
		t.Fatalf("the slots keep %v once the ring grew past them", slots)
	}
	for want := range 5 {
		if got, ok := r.pop(keptSlots); !ok || got.(int) != want {
			t.Fatalf("pop = %v, %v; want %d", got, ok, want)
		}
	}
}
