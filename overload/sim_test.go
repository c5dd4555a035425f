package overload

import (
	"container/heap"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/musepi/musepi/pacing"
)

// provider is a simulated model served with a capacity, as fakellm
// serves one: at most capacity(t) calls in flight, beyond it an overload
// answer after refuseAfter; an admitted call's time to first token grows
// with the load, firstToken × (1 + in flight / capacity), and its output
// then streams for decode on average: from half to one and a half times
// it, spread evenly over the calls (answers differ in length).
type provider struct {
	capacity    func(at time.Duration) int
	firstToken  time.Duration
	decode      time.Duration
	refuseAfter time.Duration
	inFlight    int
}

// simEvent is a call's end at virtual time at.
type simEvent struct {
	at      time.Duration
	seq     int
	id      string
	client  int
	outcome Outcome
}

type events []simEvent

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(simEvent)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// sim runs clients that each send one call after another through a
// Limiter to p, on virtual time, until end.
type sim struct {
	p       *provider
	l       *Limiter
	queue   events
	seq     int
	calls   []int          // per client, calls made
	waiting map[string]int // the client of each waiting call
	// requests and overload count the calls that reached the provider and
	// its overload answers; lastWait is the last time a call had to wait.
	requests, overload int
	lastWait           time.Duration
	// served is ∫ min(in flight, capacity) dt and capacity ∫ capacity dt
	// over the window [from, to): the share of the capacity used.
	from, to         time.Duration
	served, capacity float64
	last             time.Duration
	limits           []Change // the limit each time it changed, at its virtual time
}

// send puts a call of client to the provider at now.
func (s *sim) send(now time.Duration, client int, id string) {
	s.seq++
	e := simEvent{seq: s.seq, id: id, client: client}
	s.requests++
	if c := s.p.capacity(now); s.p.inFlight >= c {
		e.at, e.outcome = now+s.p.refuseAfter, Outcome{Result: Overloaded}
		s.overload++
	} else {
		s.p.inFlight++
		ttft := time.Duration(float64(s.p.firstToken) * (1 + float64(s.p.inFlight)/float64(c)))
		spread := 0.5 + float64(s.seq*7919%1000)/1000
		e.at, e.outcome = now+ttft+time.Duration(spread*float64(s.p.decode)), Outcome{Result: Answered, FirstToken: ttft}
	}
	heap.Push(&s.queue, e)
}

// next makes client's next call at now: it goes, or waits for a grant.
func (s *sim) next(now time.Duration, client int) {
	s.calls[client]++
	id := fmt.Sprintf("k%d-%d", client, s.calls[client])
	if s.l.Acquire(id, key, pacing.Normal) {
		s.send(now, client, id)
		return
	}
	s.waiting[id] = client
	s.lastWait = now
}

// advance accounts the provider's use up to now.
func (s *sim) advance(now time.Duration) {
	a, b := max(s.last, s.from), min(now, s.to)
	if b > a {
		c := s.p.capacity(a)
		dt := (b - a).Seconds()
		s.served += float64(min(s.p.inFlight, c)) * dt
		s.capacity += float64(c) * dt
	}
	s.last = now
}

func (s *sim) run(clients int, end time.Duration) {
	s.calls, s.waiting = make([]int, clients), map[string]int{}
	for c := range clients {
		s.next(0, c)
	}
	for s.queue.Len() > 0 {
		e := heap.Pop(&s.queue).(simEvent)
		if e.at > end {
			break
		}
		s.advance(e.at)
		if e.outcome.Result == Answered {
			s.p.inFlight--
		}
		before := s.l.Limit(key)
		for _, g := range s.l.Release(t0.Add(e.at), e.id, e.outcome) {
			s.send(e.at, s.waiting[g.ID], g.ID)
			delete(s.waiting, g.ID)
		}
		if after := s.l.Limit(key); after != before {
			s.limits = append(s.limits, Change{At: t0.Add(e.at), Limit: after})
		}
		s.next(e.at, e.client)
	}
}

// recovered is how long after at the limit first reached want.
func (s *sim) recovered(at time.Duration, want int) (time.Duration, bool) {
	limit := s.l.s.Max
	for _, c := range s.limits {
		limit = c.Limit
		if d := c.At.Sub(t0); d >= at && limit >= want {
			return d - at, true
		}
	}
	return 0, limit >= want
}

// TestSimulatedOverload runs the scenario on virtual time: a
// model of capacity 200, then 40 for 60 s, then 200 again, and more
// clients than it takes, each sending one call after another.
func TestSimulatedOverload(t *testing.T) {
	const (
		drop, back = 30 * time.Second, 90 * time.Second
		end        = 120 * time.Second
	)
	capacity := func(at time.Duration) int {
		if at >= drop && at < back {
			return 40
		}
		return 200
	}
	tests := []struct {
		name     string
		clients  int
		overload float64 // at most this share of the requests are overload answers, cold start included
		used     float64 // the low window's capacity used, at least
	}{
		{"1,000 clients", 1000, 0.05, 0.9},
		{"400 clients", 400, 0.05, 0.9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &sim{
				p: &provider{capacity: capacity, firstToken: 500 * time.Millisecond, decode: 1500 * time.Millisecond,
					refuseAfter: 50 * time.Millisecond},
				l: New(Settings{}), from: drop, to: back,
			}
			s.run(tt.clients, end)
			share := float64(s.overload) / float64(s.requests)
			t.Logf("%d requests, %d overload answers (%.2f%%), low window's capacity used %.1f%%",
				s.requests, s.overload, 100*share, 100*s.served/s.capacity)
			if share > tt.overload {
				t.Errorf("overload answers are %.1f%% of the requests, want at most %.0f%%", 100*share, 100*tt.overload)
			}
			if used := s.served / s.capacity; used < tt.used {
				t.Errorf("the low window used %.1f%% of its capacity, want at least %.0f%%", 100*used, 100*tt.used)
			}
			d, ok := s.recovered(back, 180)
			if !ok || d > 10*time.Second {
				t.Errorf("the limit reached 90%% of the capacity %v after it came back (ok %v), want within 10 s; limits: %v", d, ok, s.limits)
			}
			t.Logf("limit back to 180 %v after the capacity returned", d)
			i := slices.IndexFunc(s.l.History(key), func(c Change) bool { return c.Reason == Overload })
			if first := s.l.History(key)[max(i, 0)]; i < 0 || first.At.Sub(t0) > 10*time.Second || first.Limit != 180 {
				t.Errorf("the first overload answers brought the limit to %d at %v, want 180 (0.9 × the capacity and one) within the slow start's first rounds", first.Limit, first.At.Sub(t0))
			}
		})
	}
}

// TestHealthyProviderNeverBinds: as many clients as the initial limit
// never wait; more than it wait for the slow start's first rounds only
// (the limit doubles a round while used); none sees an overload answer.
func TestHealthyProviderNeverBinds(t *testing.T) {
	tests := []struct {
		clients  int
		waitedTo time.Duration // the last wait, at most
	}{
		{DefaultInitial, 0},
		// A round here is 1.5 to 3 s (the first token, then the output).
		{150, 4 * time.Second},
		{190, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d clients", tt.clients), func(t *testing.T) {
			s := &sim{
				p: &provider{capacity: func(time.Duration) int { return 200 }, firstToken: 500 * time.Millisecond,
					decode: 1500 * time.Millisecond, refuseAfter: 50 * time.Millisecond},
				l: New(Settings{}),
			}
			s.run(tt.clients, 60*time.Second)
			if s.overload != 0 || s.lastWait > tt.waitedTo {
				t.Fatalf("overload answers %d, a call waited at %v; want 0, none after %v", s.overload, s.lastWait, tt.waitedTo)
			}
			for _, c := range s.l.History(key) {
				if c.Reason != Raised {
					t.Fatalf("the limit went down: %+v", c)
				}
			}
			t.Logf("the last wait at %v, limit %d", s.lastWait, s.l.Limit(key))
		})
	}
}
