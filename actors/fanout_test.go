package actors_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	return actors.NewFanout(clk, slog.New(slog.DiscardHandler), queueLen), clk
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

// With no subscriber a fan-out allocates nothing, to be made or to publish
// (after one came and went, nothing to publish either).
func TestFanoutNoSubscribers(t *testing.T) {
	f, clk := newVirtualFanout(1)
	f.Publish(event(1))
	waitIdle(t, clk)
	cfg := actors.NewFanoutConfig(clk, slog.New(slog.DiscardHandler), 0)
	var embedded struct{ events actors.Fanout }
	ev := event(2)
	if allocs := testing.AllocsPerRun(100, func() {
		embedded.events.Init(cfg)
		embedded.events.Publish(ev)
		_ = embedded.events.HasSubscribers()
	}); allocs != 0 {
		t.Errorf("a fan-out with no subscriber allocates %.1f times", allocs)
	}
	f.Subscribe(func(*messages.SessionEvent) {})()
	if allocs := testing.AllocsPerRun(100, func() { f.Publish(ev) }); allocs != 0 || f.HasSubscribers() {
		t.Errorf("after its subscriber left, publishing allocates %.1f times", allocs)
	}
}

// A subscriber stuck forever blocks neither Publish nor the others.
func TestFanoutBlockedSubscriber(t *testing.T) {
	f := actors.NewFanout(clock.Real{}, slog.New(slog.DiscardHandler), 64) // room for every event
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

// scripted is an event of the kind named by c: 'd' a delta
// (message_update), 'o' an ordinary event (agent_start), 't' a terminal one
// (agent_settled).
func scripted(c byte, seq uint64) *messages.SessionEvent {
	ev := &messages.SessionEvent{SessionId: "s", Seq: seq}
	switch c {
	case 'd':
		ev.Event = &messages.SessionEvent_MessageUpdate{MessageUpdate: &messages.MessageUpdate{Kind: "text", Delta: "x"}}
	case 'o':
		ev.Event = &messages.SessionEvent_AgentStart{AgentStart: &messages.AgentStart{}}
	case 't':
		ev.Event = &messages.SessionEvent_AgentSettled{AgentSettled: &messages.AgentSettled{}}
	}
	return ev
}

// expand turns "d*3 t" into "ddd t" (kinds with repeat counts).
func expand(script string) string {
	var out strings.Builder
	for _, f := range strings.Fields(script) {
		kind, n := f, 1
		if i := strings.IndexByte(f, '*'); i > 0 {
			kind = f[:i]
			fmt.Sscan(f[i+1:], &n)
		}
		out.WriteString(strings.Repeat(kind, n))
	}
	return out.String()
}

// A subscriber blocked on event 1 while the script's events are published:
// deltas are dropped first, terminal events never, and the count of what
// was dropped comes before the next non-delta event (or at the end).
func TestFanoutOverflow(t *testing.T) {
	tests := []struct {
		name     string
		queueLen int // the reserve for non-deltas is max(queueLen/4, 16)
		script   string
		want     string // delivered seqs; "lost=N" for events_lost
	}{
		{"fits", 4, "d*5", "1-5"},
		{"one delta lost", 4, "d*6", "1-5 lost=1"},
		{"many deltas lost", 4, "d*20", "1-5 lost=15"},
		{"default queue length", 0, fmt.Sprintf("d*%d", actors.DefaultQueueLen+3), fmt.Sprintf("1-%d lost=2", actors.DefaultQueueLen+1)},
		{"a terminal event after lost deltas", 4, "d*30 t", "1-5 lost=25 31"},
		{"other events use the reserve", 4, "d*10 o*3 t", "1-5 lost=5 11-14"},
		{"a full reserve pushes out deltas, then ordinary events", 4, "d*5 o*20 t", "1 lost=5 7-26"},
		{"ordinary events beyond the reserve are dropped", 4, "d o*30 t", "1 lost=11 3-21 32"},
		{"terminal events are never dropped", 4, "d t*40", "1-41"},
		{"terminal events push out ordinary ones", 4, "d o*20 t*3", "1 lost=3 5-24"},
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
			kinds := expand(tt.script)
			f.Publish(scripted(kinds[0], 1))
			<-entered
			for i := 1; i < len(kinds); i++ {
				f.Publish(scripted(kinds[i], uint64(i+1)))
			}
			close(release)
			waitIdle(t, clk)
			want := ranges(tt.want)
			slow.expect(t, "slow", want)

			// Once drained, later events flow without a new notice.
			next := uint64(len(kinds) + 1)
			f.Publish(scripted('d', next))
			waitIdle(t, clk)
			slow.expect(t, "slow after drain", append(slices.Clone(want), fmt.Sprint(next)))
		})
	}
}

// ranges expands "1-3 lost=2 7" into "1", "2", "3", "s lost=2", "7".
func ranges(spec string) []string {
	var out []string
	for _, f := range strings.Fields(spec) {
		var from, to int
		switch {
		case strings.HasPrefix(f, "lost="):
			out = append(out, "s "+f)
		case strings.Contains(f, "-"):
			fmt.Sscanf(f, "%d-%d", &from, &to)
			out = append(out, seqs(from, to)...)
		default:
			fmt.Sscan(f, &from)
			out = append(out, fmt.Sprint(from))
		}
	}
	return out
}

// A subscriber that never reads while a session streams on: its queue stays
// bounded (the deltas are dropped), and every terminal event is still there
// for it, with the count of what it missed, when it reads again.
func TestFanoutSubscriberThatNeverReads(t *testing.T) {
	const queueLen, prompts, deltasPerPrompt = 64, 50, 2000
	f, clk := newVirtualFanout(queueLen)
	entered, release := make(chan struct{}), make(chan struct{})
	var settled, lost, notices, delivered int
	var mu sync.Mutex
	f.Subscribe(func(ev *messages.SessionEvent) {
		if ev.GetSeq() == 1 {
			close(entered)
			<-release
		}
		mu.Lock()
		defer mu.Unlock()
		delivered++
		switch {
		case ev.GetAgentSettled() != nil:
			settled++
		case ev.GetEventsLost() != nil:
			lost += int(ev.GetEventsLost().GetCount())
			notices++
		}
	})
	seq := uint64(0)
	publish := func(kind byte) {
		seq++
		f.Publish(scripted(kind, seq))
	}
	publish('o')
	<-entered
	for range prompts {
		publish('o')
		for range deltasPerPrompt {
			publish('d')
		}
		publish('t')
	}
	close(release)
	waitIdle(t, clk)
	mu.Lock()
	defer mu.Unlock()
	if settled != prompts {
		t.Errorf("agent_settled delivered %d times, want %d", settled, prompts)
	}
	// Held at most: the queue, its reserve, the terminal events beyond
	// them, and the events_lost notices.
	if bound := queueLen + 16 + prompts + prompts; delivered > bound {
		t.Errorf("delivered %d events, want at most %d: the queue was not bounded", delivered, bound)
	}
	if events := delivered - notices; events+lost != int(seq) {
		t.Errorf("%d events delivered + %d counted lost != %d published", events, lost, seq)
	}
	if lost < prompts*deltasPerPrompt-queueLen {
		t.Errorf("lost = %d, want at least %d deltas counted", lost, prompts*deltasPerPrompt-queueLen)
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
	f := actors.NewFanout(clk, slog.New(zerolog.NewSlogHandler(zerolog.New(&logs))), 8)
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

// Flush returns once every subscriber has been called with what was
// published, and with ctx's error when a subscriber does not finish.
func TestFanoutFlush(t *testing.T) {
	f := actors.NewFanout(clock.Real{}, slog.New(slog.DiscardHandler), 0)
	var got atomic.Int64
	release := make(chan struct{})
	unsub := f.Subscribe(func(*messages.SessionEvent) { <-release; got.Add(1) })
	defer unsub()
	for range 3 {
		f.Publish(&messages.SessionEvent{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := f.Flush(ctx); err == nil {
		t.Fatal("Flush returned nil with a subscriber blocked")
	}
	close(release)
	if err := f.Flush(context.Background()); err != nil || got.Load() != 3 {
		t.Fatalf("Flush = %v with %d of 3 events delivered", err, got.Load())
	}
}
