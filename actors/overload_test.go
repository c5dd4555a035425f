package actors

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/pacing"
)

// newLimitedActor is a credentials actor with key A (paced by limits,
// when set), and an overload limiter that starts at max places a model.
func newLimitedActor(t *testing.T, max int, limits pacing.Limits) *pacedActor {
	clk := clock.NewVirtual(time.Unix(1_000, 0))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	t.Cleanup(sys.Shutdown)
	creds := []Credential{{Name: "A", RateLimits: limits}}
	policy := CredentialsPolicy{Overload: &overload.Settings{Max: max}, Pacing: limits != pacing.Limits{}, Window: time.Minute}
	view := NewCredentialsView(creds)
	return &pacedActor{t: t, clk: clk, sys: sys, boxes: map[string]*inbox{}, pids: map[string]*actor.PID{}, view: view,
		creds: sys.Root.Spawn(CredentialsProps(clk, creds, policy, view))}
}

func TestOverloadQueuesGrantsAndCancels(t *testing.T) {
	p := newLimitedActor(t, 2, pacing.Limits{})
	ask := func(s string, prio pacing.Priority) *protocol.CredentialSelected {
		return selected(t, p.send(s, &protocol.SelectCredential{SessionId: s, Pace: true, Token: 1, Priority: int32(prio), Model: "fake/m1"}))
	}
	end := func(s string, r overload.Result) []proto.Message {
		return p.send(s, &protocol.PacingSettle{SessionId: s, Token: 1, Credential: "A", Sent: true, Overload: int32(r)})
	}
	granted := func(s string) bool {
		got := p.settle(s)
		if len(got) > 1 {
			t.Fatalf("%s got %v", s, got)
		}
		return len(got) == 1 && got[0].(*protocol.PacingGrant).GetToken() == 1
	}
	for _, s := range []string{"a", "b"} {
		if got := ask(s, pacing.Normal); got.GetQueued() != 0 || got.GetToken() != 1 || got.GetCredential() != "A" {
			t.Fatalf("%s: %v; want a place at once, with its token", s, got)
		}
	}
	// The limit (2) is full: the next turns queue, high before low.
	for i, s := range []string{"low", "high", "gone"} {
		prio := []pacing.Priority{pacing.Low, pacing.High, pacing.Normal}[i]
		if got := ask(s, prio); got.GetQueued() != int32(i+1) {
			t.Fatalf("%s: %v; want queued=%d", s, got, i+1)
		}
	}
	// A queued turn aborted leaves the queue: no grant ever comes to it.
	p.send("gone", &protocol.PacingCancel{SessionId: "gone", Token: 1})
	// An overload answer lowers the limit to 1 (0.9 of the 1 in flight as
	// a went): b still holds the one place, nobody goes.
	end("a", overload.Overloaded)
	if granted("high") || granted("low") {
		t.Fatal("a turn went though the lowered limit was full")
	}
	// b's end (a 429: it says nothing of load) frees the place: the
	// high-priority turn goes first.
	end("b", overload.Neutral)
	if !granted("high") || granted("low") {
		t.Fatal("want high granted, low still queued")
	}
	// high's session goes away: its place goes to low.
	p.send("high", &protocol.ReleaseSession{SessionId: "high"})
	if !granted("low") || granted("gone") {
		t.Fatal("want low granted once high's session was released, and nothing for the aborted turn")
	}
}

// A paced turn asks for its place once its reservation is granted: one
// that waited for its key's budget may then find the limit full, and its
// session is told it waits again, for a place.
func TestOverloadAfterAPacingWait(t *testing.T) {
	p := newLimitedActor(t, 1, pacing.Limits{RPM: 1})
	ask := func(s string) *protocol.CredentialSelected {
		return selected(t, p.send(s, &protocol.SelectCredential{SessionId: s, Pace: true, Token: 1, Model: "fake/m1"}))
	}
	if got := ask("first"); got.GetWaitMs() != 0 || got.GetQueued() != 0 {
		t.Fatalf("first: %v; want its key and place at once", got)
	}
	if got := ask("next"); got.GetWaitMs() == 0 {
		t.Fatalf("next: %v; want a pacing wait", got)
	}
	if err := p.clk.Advance(context.Background(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := selected(t, p.settle("next")); got.GetQueued() != 1 || got.GetToken() != 1 {
		t.Fatalf("next, its reservation granted: %v; want queued=1 for a place", got)
	}
	p.send("first", &protocol.PacingSettle{SessionId: "first", Token: 1, Credential: "A", Sent: true})
	got := p.settle("next")
	if len(got) != 1 {
		t.Fatalf("next once first ended: %v; want its grant", got)
	}
	if g, ok := got[0].(*protocol.PacingGrant); !ok || g.GetCredential() != "A" {
		t.Fatalf("next once first ended: %v; want its grant on A", got)
	}
}

// waitLog records the capacity waits a view's observer is told of, as
// "priority model waited".
type waitLog struct {
	mu    sync.Mutex
	lines []string
}

func (w *waitLog) observe(key overload.Key, priority pacing.Priority, waited time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, fmt.Sprintf("%s %s %s", priority, key, waited))
}

func (w *waitLog) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.lines
	w.lines = nil
	return out
}

// The view carries the limiter's figures of each model as they change
// (its limit and calls in flight), and tells its observer how long each
// queued turn waited, whether its wait ended in a place or was given up.
func TestOverloadPublishesItsFigures(t *testing.T) {
	p := newLimitedActor(t, 2, pacing.Limits{})
	var waits waitLog
	p.view.ObserveWaits(waits.observe)
	key := overload.Key{Provider: "fake", Model: "m1"}
	ask := func(s string, prio pacing.Priority) {
		p.send(s, &protocol.SelectCredential{SessionId: s, Pace: true, Token: 1, Priority: int32(prio), Model: "fake/m1"})
	}
	advance := func(d time.Duration) {
		if err := p.clk.Advance(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	expectLoad := func(when string, want Load) {
		t.Helper()
		if got := p.view.Loads(); len(got) != 1 || got[key] != want {
			t.Errorf("%s: loads %v; want %v for %s only", when, got, want, key)
		}
	}
	if got := p.view.Loads(); len(got) != 0 {
		t.Fatalf("loads before any call: %v", got)
	}
	ask("a", pacing.Normal)
	expectLoad("a in flight", Load{Limit: 2, InFlight: 1})
	ask("b", pacing.Normal)
	ask("high", pacing.High)
	ask("low", pacing.Low)
	expectLoad("the limit full, two queued", Load{Limit: 2, InFlight: 2})
	advance(3 * time.Second)
	p.send("a", &protocol.PacingSettle{SessionId: "a", Token: 1, Credential: "A", Sent: true, Overload: int32(overload.Overloaded)})
	expectLoad("a overloaded", Load{Limit: 1, InFlight: 1})
	advance(2 * time.Second)
	p.send("low", &protocol.PacingCancel{SessionId: "low", Token: 1})
	advance(time.Second)
	p.send("b", &protocol.PacingSettle{SessionId: "b", Token: 1, Credential: "A", Sent: true})
	expectLoad("b ended, high in flight", Load{Limit: 1, InFlight: 1})
	if got, want := waits.take(), []string{"low fake/m1 5s", "high fake/m1 6s"}; !slices.Equal(got, want) {
		t.Errorf("waits told: %q; want %q", got, want)
	}
	p.send("high", &protocol.ReleaseSession{SessionId: "high"})
	expectLoad("all ended", Load{Limit: 1, InFlight: 0})
	if got := waits.take(); len(got) != 0 {
		t.Errorf("a turn in flight released told of a wait: %v", got)
	}
}
