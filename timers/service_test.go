package timers_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/timers"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Unix(1_700_000_000, 0)

// op is one thing a test does to the service: arm, cancel, or let time
// pass.
type op struct {
	arm, cancel string // the session
	byID        bool   // arm: delivered by id (a passivated session)
	delay       time.Duration
	ticket      uint64
	wait        time.Duration
}

func arm(session string, delay time.Duration, ticket uint64) op {
	return op{arm: session, delay: delay, ticket: ticket}
}
func armByID(session string, delay time.Duration, ticket uint64) op {
	return op{arm: session, byID: true, delay: delay, ticket: ticket}
}
func cancel(session string, ticket uint64) op { return op{cancel: session, ticket: ticket} }
func wait(d time.Duration) op                 { return op{wait: d} }

// probe is a service on a virtual clock whose deliveries are kept as
// lines "offset session ticket=n gen=n to|by-id".
type probe struct {
	clk *clock.Virtual
	svc *timers.Service
	mu  sync.Mutex
	got []string
}

func newProbe() *probe {
	p := &probe{clk: clock.NewVirtual(t0)}
	p.svc = timers.New(p.clk, func(id string, to *actor.PID, due *timers.Due) {
		how := "by-id"
		if to != nil {
			how = "to " + to.GetId()
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.got = append(p.got, fmt.Sprintf("%v %s ticket=%d gen=%d %s", p.clk.Now().Sub(t0), id, due.Ticket, due.Generation, how))
	})
	return p
}

func (p *probe) do(t *testing.T, o op) {
	t.Helper()
	switch {
	case o.arm != "":
		var to *actor.PID
		if !o.byID {
			to = actor.NewPID("local", o.arm)
		}
		p.svc.Arm(o.arm, to, o.delay, 7, o.ticket)
	case o.cancel != "":
		p.svc.Cancel(o.cancel, o.ticket)
	default:
		if err := p.clk.Advance(context.Background(), o.wait); err != nil {
			t.Fatal(err)
		}
	}
}

// The service's timers, as the spec's backoff needs them: one per
// session, replaced by a new backoff, stopped by an abort, delivered in
// due order to the session's actor or by its id.
func TestService(t *testing.T) {
	cases := []struct {
		name string
		ops  []op
		want []string
	}{
		{"a backoff ends after its delay",
			[]op{arm("a", 3*time.Second, 1)},
			[]string{"3s a ticket=1 gen=7 to a"}},
		{"a passivated session's backoff goes by its id",
			[]op{armByID("a", 40*time.Second, 1)},
			[]string{"40s a ticket=1 gen=7 by-id"}},
		{"a delay of 0 ends at the clock's next instant",
			[]op{arm("a", 0, 1), wait(0)},
			[]string{"0s a ticket=1 gen=7 to a"}},
		{"a new backoff replaces the session's timer",
			[]op{arm("a", 3*time.Second, 1), wait(time.Second), arm("a", 5*time.Second, 2)},
			[]string{"6s a ticket=2 gen=7 to a"}},
		{"an abort during the backoff cancels its timer",
			[]op{arm("a", 3*time.Second, 1), wait(time.Second), cancel("a", 1)},
			nil},
		{"a cancel of an older backoff leaves the new one",
			[]op{arm("a", 3*time.Second, 2), cancel("a", 1)},
			[]string{"3s a ticket=2 gen=7 to a"}},
		{"a cancel of ticket 0 takes any",
			[]op{armByID("a", 3*time.Second, 2), cancel("a", 0)},
			nil},
		{"a cancel of a session with no timer does nothing",
			[]op{arm("a", time.Second, 1), cancel("b", 0)},
			[]string{"1s a ticket=1 gen=7 to a"}},
		{"sessions' backoffs end in due order, those of one instant together",
			[]op{arm("a", 2*time.Second, 1), arm("b", time.Second, 2), arm("c", 2*time.Second, 3), arm("d", 500*time.Millisecond, 4), cancel("d", 4)},
			[]string{"1s b ticket=2 gen=7 to b", "2s a ticket=1 gen=7 to a", "2s c ticket=3 gen=7 to c"}},
		{"a backoff armed when another fired ends on time",
			[]op{arm("a", time.Second, 1), wait(time.Second), arm("a", time.Second, 2)},
			[]string{"1s a ticket=1 gen=7 to a", "2s a ticket=2 gen=7 to a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newProbe()
			for _, o := range c.ops {
				p.do(t, o)
			}
			if err := p.clk.RunUntilIdle(context.Background()); err != nil {
				t.Fatal(err)
			}
			slices.Sort(p.got[:]) // one instant's order among sessions is the shards'
			want := slices.Clone(c.want)
			slices.Sort(want)
			if !slices.Equal(p.got, want) {
				t.Fatalf("delivered:\n%q\nwant:\n%q", p.got, want)
			}
			if n, clocked := p.svc.Pending(), p.clk.Pending(); n != 0 || clocked != 0 {
				t.Fatalf("%d timers, %d clock timers left once idle", n, clocked)
			}
		})
	}
}

// A service idle, every timer fired or cancelled, keeps no clock timer:
// a virtual clock has nothing left to fire, and Close drops what is
// armed.
func TestServiceIdleKeepsNoClockTimer(t *testing.T) {
	p := newProbe()
	for i := range 200 { // several per shard
		p.do(t, arm(fmt.Sprint("s", i), time.Duration(i+1)*time.Second, 1))
	}
	if n := p.clk.Pending(); n == 0 || n > 8 {
		t.Fatalf("%d clock timers for 200 backoffs, want one per shard at most", n)
	}
	for i := range 100 {
		p.do(t, cancel(fmt.Sprint("s", i), 0))
	}
	p.svc.Close()
	if n, clocked := p.svc.Pending(), p.clk.Pending(); n != 0 || clocked != 0 {
		t.Fatalf("after Close: %d timers, %d clock timers", n, clocked)
	}
	if err := p.clk.RunUntilIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(p.got) != 0 {
		t.Fatalf("delivered after Close: %q", p.got)
	}
}

// Backoffs of many sessions ending at one instant, more than a shard
// hands out at once, all end then, and a later one on time after them.
func TestServiceManyAtOneInstant(t *testing.T) {
	p := newProbe()
	var want []string
	for i := range 100 {
		id := fmt.Sprint("s", i)
		p.do(t, arm(id, time.Second, 1))
		want = append(want, fmt.Sprintf("1s %s ticket=1 gen=7 to %s", id, id))
	}
	p.do(t, arm("z", 2*time.Second, 1))
	want = append(want, "2s z ticket=1 gen=7 to z")
	if err := p.clk.RunUntilIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	slices.Sort(p.got)
	slices.Sort(want)
	if !slices.Equal(p.got, want) {
		t.Fatalf("delivered:\n%q\nwant:\n%q", p.got, want)
	}
}
