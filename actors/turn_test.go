package actors

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// drip streams a delta every gap, n times, waits pause, then answers; it
// stops early when ctx ends, returning what streamed as aborted.
type drip struct {
	gap   time.Duration
	n     int
	pause time.Duration
}

func (d drip) Stream(ctx context.Context, _ provider.Request, onDelta func(provider.Delta)) *messages.AssistantMessage {
	text := ""
	for range d.n {
		select {
		case <-ctx.Done():
			return provider.Aborted([]*messages.ContentBlock{{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: text}}}})
		case <-time.After(d.gap):
		}
		onDelta(provider.Delta{Kind: "text", Text: "x"})
		text += "x"
	}
	select {
	case <-ctx.Done():
		return provider.Aborted([]*messages.ContentBlock{{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: text}}}})
	case <-time.After(d.pause):
	}
	return &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_STOP,
		Content: []*messages.ContentBlock{{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: text}}}}}
}

func (drip) ResetSession(string) {}

// finishedTo forwards the turnFinished a turn sends to a channel.
type finishedTo chan *turnFinished

func (f finishedTo) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(*turnFinished); ok {
		f <- m
	}
}

// runTurn runs one turnRun with prov on the wall clock and returns its
// final message.
func runTurn(t *testing.T, prov provider.Provider, idle time.Duration, maxBytes int) *messages.AssistantMessage {
	t.Helper()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}))
	defer system.Shutdown()
	got := make(finishedTo, 1)
	self := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return got }))
	tr := &turnRun{finished: turnFinished{turn: 1}, prov: prov, clk: clock.Real{}, root: system.Root, self: self, watch: newWatchdog(clock.Real{}, idle), maxBytes: maxBytes}
	tr.clk.Begin()
	go tr.Run()
	select {
	case m := <-got:
		return m.msg
	case <-time.After(30 * time.Second):
		t.Fatal("the turn never finished")
		return nil
	}
}

func TestTurnWatchdogAndBound(t *testing.T) {
	const idle = 400 * time.Millisecond
	tests := []struct {
		name     string
		prov     drip
		maxBytes int
		want     string // in the error message; "" for an answer
	}{
		{"steady data for longer than the idle time is not a stall", drip{gap: 10 * time.Millisecond, n: 100}, 0, ""},
		{"a stream quiet for the idle time is stalled (within 1.25 times it)", drip{gap: 5 * time.Second, n: 1}, 0, "stream stalled"},
		{"data, then quiet for the idle time, is stalled", drip{gap: 10 * time.Millisecond, n: 30, pause: 5 * time.Second}, 0, "stream stalled"},
		{"a stream past the size bound is cut", drip{gap: time.Millisecond, n: 50}, 10, "response too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg := runTurn(t, tt.prov, idle, tt.maxBytes)
			switch {
			case tt.want == "" && msg.GetStopReason() != messages.StopReason_STOP_REASON_STOP:
				t.Fatalf("got %v, want an answer", msg)
			case tt.want != "" && !strings.Contains(msg.GetErrorMessage(), tt.want):
				t.Fatalf("error %q, want %q", msg.GetErrorMessage(), tt.want)
			}
		})
	}
}

// The runtime's watchdog checks the streaming turns every quarter of the
// idle time: it cancels the quiet one, spares the one that sent, and
// leaves no timer pending once no turn streams.
func TestWatchdogChecksTheStreamingTurns(t *testing.T) {
	clk := clock.NewVirtual(time.Unix(0, 0))
	w := newWatchdog(clk, 4*time.Second)
	turn := func() *turnRun {
		tr := &turnRun{}
		tr.lastData.Store(clk.Now().UnixNano())
		w.add(tr)
		return tr
	}
	busy, quiet, busy2 := turn(), turn(), turn() // quiet between the two in the watchdog's list
	ctx := context.Background()
	for range 5 { // 5 s: the busy ones send every second, quiet never
		if err := clk.Advance(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		busy.lastData.Store(clk.Now().UnixNano())
		busy2.lastData.Store(clk.Now().UnixNano())
	}
	if !errors.Is(quiet.cancelCause(), errStreamStalled) {
		t.Errorf("the quiet turn: cause %v, want stalled after 5 s (idle 4 s)", quiet.cancelCause())
	}
	for _, b := range []*turnRun{busy, busy2} {
		if b.Err() != nil {
			t.Errorf("a busy turn was cancelled: %v", b.cancelCause())
		}
	}
	w.remove(quiet)
	w.remove(busy)
	w.remove(busy2)
	if n := clk.Pending(); n != 0 {
		t.Errorf("%d timers pending with no turn streaming, want 0", n)
	}
}

// A runContext is a context: the contexts derived from it register with
// it (no goroutine each) and are cancelled with it, at once; its cause is
// kept; what derives from it once cancelled is born cancelled.
func TestRunContext(t *testing.T) {
	rc := new(runContext)
	child, stopChild := context.WithTimeout(rc, time.Hour)
	defer stopChild()
	_, cancelGone := context.WithCancel(rc)
	cancelGone() // unregisters itself
	called := make(chan struct{})
	context.AfterFunc(rc, func() { close(called) })
	stopped := context.AfterFunc(rc, func() { t.Error("a function stopped before cancel ran") })
	if !stopped() {
		t.Error("stop before cancel reported that it did not stop the function")
	}
	if n := len(rc.after); n != 2 {
		t.Fatalf("%d cancellations registered, want 2 (the timeout and the AfterFunc)", n)
	}
	if rc.Err() != nil || child.Err() != nil {
		t.Fatalf("before cancel: turn %v, derived %v; want nil", rc.Err(), child.Err())
	}
	done := rc.Done()
	rc.cancel(errStreamStalled)
	rc.cancel(errResponseTooLarge) // the first cause stays
	select {
	case <-done:
	default:
		t.Fatal("Done is not closed after cancel")
	}
	if rc.Done() != done {
		t.Error("Done returned another channel after cancel")
	}
	if !errors.Is(child.Err(), context.Canceled) {
		t.Errorf("derived context: %v right after cancel, want context.Canceled", child.Err())
	}
	if !errors.Is(rc.Err(), context.Canceled) || !errors.Is(rc.cancelCause(), errStreamStalled) {
		t.Errorf("turn: err %v, cause %v; want context.Canceled, stream stalled", rc.Err(), rc.cancelCause())
	}
	<-called
	late, stopLate := context.WithCancel(rc)
	defer stopLate()
	if late.Err() == nil {
		t.Error("a context derived after cancel is not cancelled")
	}

	fresh := new(runContext)
	fresh.cancel(nil)
	<-fresh.Done()
	if !errors.Is(fresh.cancelCause(), context.Canceled) {
		t.Errorf("cancel(nil): cause %v, want context.Canceled", fresh.cancelCause())
	}
	ran := make(chan struct{})
	if fresh.AfterFunc(func() { close(ran) })() {
		t.Error("stop reported stopping a function registered after cancel")
	}
	<-ran
}
