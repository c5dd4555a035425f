package actors

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/mailbox"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/pacing"
)

// inbox is an actor that keeps what it is sent.
type inbox struct {
	mu  sync.Mutex
	got []proto.Message
}

func (b *inbox) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(proto.Message); ok {
		b.mu.Lock()
		b.got = append(b.got, m)
		b.mu.Unlock()
	}
}

func (b *inbox) take() []proto.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.got
	b.got = nil
	return out
}

// pacedActor is a credentials actor pacing keys A and B (60 requests a
// minute each) on a virtual clock, and one inbox per session.
type pacedActor struct {
	t     *testing.T
	clk   *clock.Virtual
	sys   *actor.ActorSystem
	creds *actor.PID
	boxes map[string]*inbox
	pids  map[string]*actor.PID
	view  *CredentialsView // the actor's, when it keeps an overload limiter
}

func newPacedActor(t *testing.T, limits pacing.Limits) *pacedActor {
	clk := clock.NewVirtual(time.Unix(1_000, 0))
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	t.Cleanup(sys.Shutdown)
	creds := []Credential{{Name: "A", RateLimits: limits}, {Name: "B", RateLimits: limits}}
	p := &pacedActor{t: t, clk: clk, sys: sys, boxes: map[string]*inbox{}, pids: map[string]*actor.PID{},
		creds: sys.Root.Spawn(CredentialsProps(clk, creds, CredentialsPolicy{Pacing: true, Window: time.Minute}, NewCredentialsView(creds)))}
	return p
}

// send sends msg to the credentials actor as session s, and waits until
// everything it caused has happened.
func (p *pacedActor) send(s string, msg proto.Message) []proto.Message {
	p.t.Helper()
	if p.pids[s] == nil {
		p.boxes[s] = &inbox{}
		box := p.boxes[s]
		p.pids[s] = p.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return box }, mailbox.Option(p.clk)))
	}
	p.clk.Begin() // the request, counted until the actor has handled it
	p.sys.Root.RequestWithCustomSender(p.creds, msg, p.pids[s])
	return p.settle(s)
}

func (p *pacedActor) settle(s string) []proto.Message {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.clk.WaitIdle(ctx); err != nil {
		p.t.Fatal(err)
	}
	return p.boxes[s].take()
}

func reserve(token uint64, prio pacing.Priority, held string, input int64) *protocol.SelectCredential {
	return &protocol.SelectCredential{SessionId: "", Pace: true, Token: token, Priority: int32(prio), Credential: held,
		InputTokens: input, OutputTokens: 0}
}

// selected is the one CredentialSelected of got.
func selected(t *testing.T, got []proto.Message) *protocol.CredentialSelected {
	t.Helper()
	if len(got) != 1 {
		t.Fatalf("got %d messages %v; want one CredentialSelected", len(got), got)
	}
	m, ok := got[0].(*protocol.CredentialSelected)
	if !ok {
		t.Fatalf("got %T; want CredentialSelected", got[0])
	}
	return m
}

func TestPacingGrantsSwitchesAndWaits(t *testing.T) {
	p := newPacedActor(t, pacing.Limits{RPM: 2}) // each key: 2 requests, then one every 30 s
	ask := func(s string, token uint64, prio pacing.Priority) *protocol.CredentialSelected {
		m := reserve(token, prio, "", 0)
		m.SessionId = s
		return selected(t, p.send(s, m))
	}
	// s1 gets A twice (sticky); the third turn finds A empty and goes to B.
	for i, want := range []string{"A", "A"} {
		if got := ask("s1", uint64(i+1), pacing.Normal); got.GetCredential() != want || got.GetWaitMs() != 0 {
			t.Fatalf("turn %d: %v; want %s at once", i+1, got, want)
		}
		p.send("s1", &protocol.PacingSettle{SessionId: "s1", Token: uint64(i + 1), Credential: "A", Sent: true})
	}
	if got := ask("s1", 3, pacing.Normal); got.GetCredential() != "B" || !got.GetSwitched() {
		t.Fatalf("turn 3: %v; want a pacing switch to B", got)
	}
	p.send("s1", &protocol.PacingSettle{SessionId: "s1", Token: 3, Credential: "B", Sent: true})
	ask("s2", 1, pacing.Normal) // B's last request, held by s2
	// Now both keys are empty: a low and then a high turn wait, 30 s each.
	low := ask("low", 1, pacing.Low)
	high := ask("high", 1, pacing.High)
	for _, w := range []*protocol.CredentialSelected{low, high} {
		if w.GetWaitMs() != 30_000 || w.GetLimit() != "requests" {
			t.Fatalf("%v; want a 30 s wait for requests", w)
		}
	}
	// After 30 s one request is back on each key: both waiting turns go
	// (which goes first when only one fits: pacing's TestReleaseGoesByPriorityThenArrival).
	ctx := context.Background()
	if err := p.clk.Advance(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{"high": true, "low": true} {
		got := p.settle(s)
		if granted := len(got) == 1; granted != want {
			t.Errorf("%s: got %v after 30 s", s, got)
		}
	}
}

func TestPacingCancelGivesBack(t *testing.T) {
	p := newPacedActor(t, pacing.Limits{RPM: 1})
	ask := func(s string) *protocol.CredentialSelected {
		m := reserve(1, pacing.Normal, "", 0)
		m.SessionId = s
		return selected(t, p.send(s, m))
	}
	ask("a")
	ask("b") // both keys spent
	// A granted turn never sent gives its request back: "a" cancels, and
	// "c" gets its key at once.
	p.send("a", &protocol.PacingCancel{SessionId: "a", Token: 1})
	if got := ask("c"); got.GetWaitMs() != 0 {
		t.Fatalf("%v; want a grant once the unused turn gave back its request", got)
	}
	// A waiting turn that cancels leaves the queue: no grant comes.
	if w := ask("waits"); w.GetWaitMs() == 0 {
		t.Fatalf("%v; want a wait", w)
	}
	p.send("waits", &protocol.PacingCancel{SessionId: "waits", Token: 1})
	if err := p.clk.Advance(context.Background(), 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := p.settle("waits"); len(got) != 0 {
		t.Errorf("a cancelled turn got %v", got)
	}
}
