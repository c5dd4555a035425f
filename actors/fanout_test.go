package actors_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func event(seq uint64) *messages.SessionEvent {
	return &messages.SessionEvent{SessionId: "s", Seq: seq,
		Event: &messages.SessionEvent_AgentStart{AgentStart: &messages.AgentStart{}}}
}

// describe is "seq" for an ordinary event, "lost=N" for EventsLost.
func describe(ev *messages.SessionEvent) string {
	if l := ev.GetEventsLost(); l != nil {
		return fmt.Sprintf("%s lost=%d", ev.GetSessionId(), l.GetCount())
	}
	return fmt.Sprint(ev.GetSeq())
}

// seqs is "from".."to" as strings.
func seqs(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprint(i))
	}
	return out
}

// recorder is a subscriber that records what it is given.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) add(ev *messages.SessionEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, describe(ev))
}

func (r *recorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *recorder) expect(t *testing.T, name string, want []string) {
	t.Helper()
	if got := r.lines(); !slices.Equal(got, want) {
		t.Errorf("%s got %v, want %v", name, got, want)
	}
}

func waitIdle(t *testing.T, clk *clock.Virtual) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := clk.WaitIdle(ctx); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
}

func newVirtualFanout(queueLen int) (*actors.Fanout, *clock.Virtual) {
	clk := clock.NewVirtual(time.Unix(0, 0))
	return actors.NewFanout(clk, zerolog.Nop(), queueLen), clk
}

func TestFanoutInOrderPerSubscriber(t *testing.T) {
	f, clk := newVirtualFanout(0)
	recs := make([]*recorder, 3)
	for i := range recs {
		recs[i] = &recorder{}
		f.Subscribe(recs[i].add)
	}
	for i := 1; i <= 200; i++ {
		f.Publish(event(uint64(i)))
	}
	waitIdle(t, clk)
	for i, r := range recs {
		r.expect(t, fmt.Sprint("subscriber ", i), seqs(1, 200))
	}
}

func TestFanoutNoSubscribers(t *testing.T) {
	f, clk := newVirtualFanout(1)
	f.Publish(event(1))
	waitIdle(t, clk)
}

// A subscriber stuck forever blocks neither Publish nor the others.
func TestFanoutBlockedSubscriber(t *testing.T) {
	f := actors.NewFanout(clock.Real{}, zerolog.Nop(), 64) // room for every event
	release := make(chan struct{})
	defer close(release)
	f.Subscribe(func(*messages.SessionEvent) { <-release })
	fast := make(chan uint64, 100)
	f.Subscribe(func(ev *messages.SessionEvent) { fast <- ev.GetSeq() })

	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 1; i <= 50; i++ {
			f.Publish(event(uint64(i)))
		}
	}()
	select {
	case <-published:
	case <-time.After(5 * time.Second):
		t.Fatal("Publish blocked on a stuck subscriber")
	}
	for want := uint64(1); want <= 50; want++ {
		select {
		case got := <-fast:
			if got != want {
				t.Fatalf("fast subscriber got %d, want %d", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("fast subscriber did not get event %d", want)
		}
	}
}

func TestFanoutOverflow(t *testing.T) {
	tests := []struct {
		name      string
		queueLen  int
		published int // the first is in delivery when the others arrive
		want      []string
	}{
		{"fits", 4, 5, seqs(1, 5)},
		{"one lost", 4, 6, append(seqs(1, 5), "s lost=1")},
		{"many lost", 4, 20, append(seqs(1, 5), "s lost=15")},
		{"default queue length", 0, actors.DefaultQueueLen + 3, append(seqs(1, actors.DefaultQueueLen+1), "s lost=2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, clk := newVirtualFanout(tt.queueLen)
			entered, release := make(chan struct{}), make(chan struct{})
			slow := &recorder{}
			f.Subscribe(func(ev *messages.SessionEvent) {
				slow.add(ev)
				if ev.GetSeq() == 1 {
					close(entered)
					<-release
				}
			})

			f.Publish(event(1))
			<-entered
			for i := 2; i <= tt.published; i++ {
				f.Publish(event(uint64(i)))
			}
			close(release)
			waitIdle(t, clk)
			slow.expect(t, "slow", tt.want)

			// Once drained, later events flow without a new notice.
			f.Publish(event(uint64(tt.published + 1)))
			waitIdle(t, clk)
			slow.expect(t, "slow after drain", append(slices.Clone(tt.want), fmt.Sprint(tt.published+1)))
		})
	}
}

func TestFanoutUnsubscribe(t *testing.T) {
	f, clk := newVirtualFanout(4)
	a, b := &recorder{}, &recorder{}
	unsubA := f.Subscribe(a.add)
	f.Subscribe(b.add)

	f.Publish(event(1))
	waitIdle(t, clk)
	unsubA()
	unsubA() // twice is harmless
	f.Publish(event(2))
	waitIdle(t, clk)

	a.expect(t, "unsubscribed", []string{"1"})
	b.expect(t, "subscribed", []string{"1", "2"})
}

// Events still queued when a subscriber leaves are not delivered.
func TestFanoutUnsubscribeDropsQueued(t *testing.T) {
	f, clk := newVirtualFanout(4)
	entered, release := make(chan struct{}), make(chan struct{})
	r := &recorder{}
	unsub := f.Subscribe(func(ev *messages.SessionEvent) {
		r.add(ev)
		if ev.GetSeq() == 1 {
			close(entered)
			<-release
		}
	})
	f.Publish(event(1))
	<-entered
	f.Publish(event(2))
	f.Publish(event(3))
	unsub()
	close(release)
	waitIdle(t, clk)
	r.expect(t, "unsubscribed", []string{"1"})
}

// syncBuffer is a log sink safe for the delivery goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestFanoutPanickingSubscriber(t *testing.T) {
	clk := clock.NewVirtual(time.Unix(0, 0))
	var logs syncBuffer
	f := actors.NewFanout(clk, zerolog.New(&logs), 8)
	panicky, other := &recorder{}, &recorder{}
	f.Subscribe(func(ev *messages.SessionEvent) {
		panicky.add(ev)
		if ev.GetSeq()%2 == 0 {
			panic(fmt.Sprint("boom ", ev.GetSeq()))
		}
	})
	f.Subscribe(other.add)
	for i := 1; i <= 5; i++ {
		f.Publish(event(uint64(i)))
		if i == 3 {
			waitIdle(t, clk) // a later delivery goroutine is started afresh
		}
	}
	waitIdle(t, clk)
	panicky.expect(t, "panicking", seqs(1, 5))
	other.expect(t, "other", seqs(1, 5))
	if got := logs.String(); strings.Count(got, "subscriber panicked") != 2 || !strings.Contains(got, "boom 4") {
		t.Errorf("log = %q, want two panics logged", got)
	}
}
