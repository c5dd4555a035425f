package cluster

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/pacing"
)

// lookups answers the PIDs it is given, one per Get (the last one
// repeats), and counts the Forgets.
type lookups struct {
	mu      sync.Mutex
	pids    []*actor.PID
	gets    int
	forgets int
}

func (l *lookups) Get(string, string) *actor.PID {
	l.mu.Lock()
	defer l.mu.Unlock()
	pid := l.pids[min(l.gets, len(l.pids)-1)]
	l.gets++
	return pid
}

func (l *lookups) Forget(string, string, *actor.PID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgets++
}

func newTestRouter(t *testing.T, sys *actor.ActorSystem, kind string, l lookup, view *actors.CredentialsView) *actor.PID {
	t.Helper()
	r := &router{kind: kind, identity: "p", res: l, timeout: 50 * time.Millisecond, attempts: 2, creds: []string{"A", "B"}, view: view,
		log: slog.New(slog.DiscardHandler)}
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return r }))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	return pid
}

// TestRouterAnswersDegradedWhenUnreachable: an activation that never
// answers gets RequestAttempts attempts of RequestTimeout each, each
// forgetting the PID and looking it up again; then the caller gets the
// degraded reply, from the node's view of the keys, instead of waiting
// forever.
func TestRouterAnswersDegradedWhenUnreachable(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	silent := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {})) // receives, never answers
	creds := []actors.Credential{{Name: "A"}, {Name: "B"}}
	bUntil := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name    string
		kind    string
		blocked map[string]time.Time // in the node's view before the request
		req     proto.Message
		want    proto.Message
	}{
		{"usage limit: switch to the key the view shows free", CredentialsKind, nil,
			&protocol.MarkUsageLimitReached{SessionId: "s", BlockForMs: 60_000, Token: 5, Credential: "A"},
			&protocol.UsageLimitReply{Token: 5, Switched: true, Credential: "B"}},
		{"usage limit: no key free, the earliest's time", CredentialsKind, map[string]time.Time{"B": bUntil},
			&protocol.MarkUsageLimitReached{SessionId: "s", BlockForMs: 1000, Token: 5, Credential: "A"},
			&protocol.UsageLimitReply{Token: 5, RetryAtMs: bUntil.UnixMilli()}},
		{"selection: the first key free", CredentialsKind, map[string]time.Time{"A": bUntil},
			&protocol.SelectCredential{SessionId: "s"}, &protocol.CredentialSelected{Credential: "B"}},
		{"selection: none free, the first key", CredentialsKind, map[string]time.Time{"A": bUntil, "B": bUntil},
			&protocol.SelectCredential{SessionId: "s"}, &protocol.CredentialSelected{Credential: "A"}},
		{"budget: at the due time", CredentialsKind, nil, &protocol.RetryBudgetRequest{SessionId: "s", Token: 6, DueUnixNano: 42},
			&protocol.RetryBudgetGrant{Token: 6, AtUnixNano: 42, SessionId: "s"}},
		{"budget stats: empty", CredentialsKind, nil, &protocol.RetryBudgetStatsRequest{}, &protocol.RetryBudgetStats{}},
		{"fallback: no switch", FallbackKind, nil, &protocol.NextModelRequest{SessionId: "s", Role: "default", Current: "p/m1", Token: 7},
			&protocol.NextModelReply{From: "p/m1", Role: "default", Token: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &lookups{pids: []*actor.PID{silent}}
			view := actors.NewCredentialsView(creds)
			for name, until := range tc.blocked {
				view.Set(name, until)
			}
			pid := newTestRouter(t, sys, tc.kind, l, view)
			start := time.Now()
			got, err := sys.Root.RequestFuture(pid, tc.req, 5*time.Second).Result()
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			if !proto.Equal(got.(proto.Message), tc.want) {
				t.Fatalf("got %v; want %v", got, tc.want)
			}
			if m, ok := tc.req.(*protocol.MarkUsageLimitReached); ok && view.Free(m.GetCredential(), time.Now()) {
				t.Errorf("the node's view still shows %s free after its usage limit", m.GetCredential())
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.gets != 2 || l.forgets != 2 {
				t.Errorf("%d lookups, %d forgets; want 2 attempts, each forgotten", l.gets, l.forgets)
			}
			if took := time.Since(start); took < 100*time.Millisecond {
				t.Errorf("answered after %v; want after the 2 attempts of 50 ms", took)
			}
		})
	}
}

// TestRouterFindsTheNewActivation: a request to a dead activation (a dead
// letter) is retried on the PID the next lookup gives, and the caller gets
// the live activation's answer.
func TestRouterFindsTheNewActivation(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	dead := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	if err := sys.Root.StopFuture(dead).Wait(); err != nil {
		t.Fatal(err)
	}
	creds := []actors.Credential{{Name: "A"}, {Name: "B"}}
	live := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return actors.NewCredentialsActor(clock.Real{}, creds, actors.CredentialsPolicy{}, actors.NewCredentialsView(creds))
	}))
	l := &lookups{pids: []*actor.PID{dead, live}}
	pid := newTestRouter(t, sys, CredentialsKind, l, actors.NewCredentialsView(creds))
	got, err := sys.Root.RequestFuture(pid, &protocol.MarkUsageLimitReached{SessionId: "s", BlockForMs: 1000, Token: 3}, 5*time.Second).Result()
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if r, ok := got.(*protocol.UsageLimitReply); !ok || !r.GetSwitched() || r.GetCredential() != "B" {
		t.Fatalf("got %v; want the live actor's switch to B", got)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gets != 2 || l.forgets != 1 {
		t.Errorf("%d lookups, %d forgets; want the dead PID forgotten and looked up again", l.gets, l.forgets)
	}
}

// lagging answers the dead PID until its directory has caught up (lag
// after it was made), then the live one: the moment after an activation
// stopped in which the cluster's lookups still name it.
type lagging struct {
	dead, live *actor.PID
	caughtUp   time.Time
}

func (l *lagging) Get(string, string) *actor.PID {
	if time.Now().Before(l.caughtUp) {
		return l.dead
	}
	return l.live
}

func (l *lagging) Forget(string, string, *actor.PID) {}

// TestRouterPausesBetweenAttempts: lookups that still name a stopped
// activation for a moment do not use up the attempts: the router pauses
// before each new lookup, so a request sent just after the stop gets the
// new activation's answer, not the degraded reply.
func TestRouterPausesBetweenAttempts(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	dead := sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
	if err := sys.Root.StopFuture(dead).Wait(); err != nil {
		t.Fatal(err)
	}
	view := &actors.CooldownView{}
	live := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return actors.NewFallbackActor(clock.Real{}, "default", []string{"p/m1", "p/m2"}, view)
	}))
	l := &lagging{dead: dead, live: live, caughtUp: time.Now().Add(25 * time.Millisecond)} // less than the pause
	pid := newTestRouter(t, sys, FallbackKind, l, nil)
	got, err := sys.Root.RequestFuture(pid, &protocol.NextModelRequest{SessionId: "s", Role: "default", Current: "p/m1", Primary: "p/m1", Token: 4}, 5*time.Second).Result()
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if r, ok := got.(*protocol.NextModelReply); !ok || !r.GetSwitched() || r.GetTo() != "p/m2" {
		t.Fatalf("got %v; want the new activation's switch to p/m2", got)
	}
}

// TestRouterPacing: a paced selection through the router that has to
// wait gets its later PacingGrant at its reply_to (the session), not at
// the router's request future; settles and cancels are passed on.
func TestRouterPacing(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	creds := []actors.Credential{{Name: "A", RateLimits: pacing.Limits{RPM: 1}}}
	view := actors.NewCredentialsView(creds)
	live := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return actors.NewCredentialsActor(clock.Real{}, creds, actors.CredentialsPolicy{Pacing: true}, view)
	}))
	pid := newTestRouter(t, sys, CredentialsKind, &lookups{pids: []*actor.PID{live}}, view)
	grants := make(chan *protocol.PacingGrant, 1)
	session := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if g, ok := ctx.Message().(*protocol.PacingGrant); ok {
			grants <- g
		}
	}))
	ask := func(s string) *protocol.CredentialSelected {
		got, err := sys.Root.RequestFuture(pid, &protocol.SelectCredential{SessionId: s, Pace: true, Token: 1, ReplyTo: actors.Ref(session)}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		return got.(*protocol.CredentialSelected)
	}
	if r := ask("first"); r.GetWaitMs() != 0 {
		t.Fatalf("first: %v; want a grant", r)
	}
	if r := ask("second"); r.GetWaitMs() == 0 {
		t.Fatalf("second: %v; want a wait (the minute's request is spent)", r)
	}
	// The first turn was never sent: cancelling it gives its request back,
	// and the waiting turn is granted at its session.
	sys.Root.Send(pid, &protocol.PacingCancel{SessionId: "first", Token: 1})
	select {
	case g := <-grants:
		if g.GetSessionId() != "second" || g.GetCredential() != "A" {
			t.Errorf("grant %v; want second's on A", g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no PacingGrant reached the session")
	}
}

// TestRouterOverloadLimiter: with the node's limiter (Provider.Overload)
// the router keeps its node's places, the activation none; its models
// start at Initial shared among the members; a selection beyond the
// limit is queued, its session granted when a settle frees a
// place; the limit is published to the node's view; a cancelled waiting
// turn gets no grant.
func TestRouterOverloadLimiter(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	creds := []actors.Credential{{Name: "A"}}
	view := actors.NewCredentialsView(creds)
	live := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return actors.NewCredentialsActor(clock.Real{}, creds, actors.CredentialsPolicy{}, view)
	}))
	r := &router{kind: CredentialsKind, identity: "p", res: &lookups{pids: []*actor.PID{live}}, timeout: time.Second, attempts: 2,
		creds: []string{"A"}, view: view, log: slog.New(slog.DiscardHandler),
		overload: &overload.Settings{Initial: 3}, members: func() int { return 2 }} // 3 shared by 2 members: 1 each
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return r }))
	grants := make(chan *protocol.PacingGrant, 4)
	session := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if g, ok := ctx.Message().(*protocol.PacingGrant); ok {
			grants <- g
		}
	}))
	ask := func(s string, token uint64) *protocol.CredentialSelected {
		got, err := sys.Root.RequestFuture(pid, &protocol.SelectCredential{SessionId: s, Pace: true, Token: token, Model: "p/m",
			ReplyTo: actors.Ref(session)}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		return got.(*protocol.CredentialSelected)
	}
	if got := ask("first", 1); got.GetQueued() != 0 || got.GetToken() != 1 {
		t.Fatalf("first: %v; want a place (token 1)", got)
	}
	if n, ok := view.ConcurrencyLimit(overload.Key{Provider: "p", Model: "m"}); !ok || n != 1 {
		t.Errorf("the view's limit %d, %v; want 1 (Initial 3 over 2 members)", n, ok)
	}
	if got := ask("second", 2); got.GetQueued() != 1 {
		t.Fatalf("second: %v; want queued, 1 waiting", got)
	}
	if got := ask("third", 3); got.GetQueued() != 2 {
		t.Fatalf("third: %v; want queued, 2 waiting", got)
	}
	sys.Root.Send(pid, &protocol.PacingCancel{SessionId: "second", Token: 2})
	sys.Root.Send(pid, &protocol.PacingSettle{SessionId: "first", Token: 1, Overload: int32(overload.Answered)})
	select {
	case g := <-grants:
		if g.GetSessionId() != "third" || g.GetToken() != 3 || g.GetCredential() != "A" {
			t.Errorf("grant %v; want third's (token 3) on A", g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no PacingGrant reached the waiting session")
	}
}

// TestWireOverloadWithoutCredentials: a provider with the node's limiter
// and no credentials (its adapter's own key) gets its router as its
// credentials actor, for its turns' places, and no keys; one with neither
// gets none, as a single runtime.
func TestWireOverloadWithoutCredentials(t *testing.T) {
	cfg := Config{Providers: []Provider{{Name: "limited", Overload: &overload.Settings{}}, {Name: "bare"}}}
	limited, bare := actor.NewPID("nonhost", "limited"), actor.NewPID("nonhost", "bare")
	m := &Member{cfg: cfg, views: newViews(cfg), credentials: map[string]*actor.PID{"limited": limited, "bare": bare}}
	var d actors.Deps
	m.Wire(&d)
	if d.Credentials["limited"] != limited || d.Credentials["bare"] != nil || len(d.Keys) != 0 {
		t.Errorf("credentials %v, keys %v; want the limited provider's router alone, and no keys", d.Credentials, d.Keys)
	}
}

// TestRouterOverloadLimiterPaced: with pacing at the activation and the
// node's limiter at the router, a turn that waits for its reservation
// gets its PacingGrant through the router, which seats it first: with a
// place it goes on to the session.
func TestRouterOverloadLimiterPaced(t *testing.T) {
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	creds := []actors.Credential{{Name: "A", RateLimits: pacing.Limits{RPM: 1}}}
	view := actors.NewCredentialsView(creds)
	live := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return actors.NewCredentialsActor(clock.Real{}, creds, actors.CredentialsPolicy{Pacing: true}, view)
	}))
	r := &router{kind: CredentialsKind, identity: "p", res: &lookups{pids: []*actor.PID{live}}, timeout: time.Second, attempts: 2,
		creds: []string{"A"}, view: view, log: slog.New(slog.DiscardHandler),
		overload: &overload.Settings{}, members: func() int { return 1 }}
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return r }))
	grants := make(chan *protocol.PacingGrant, 1)
	session := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if g, ok := ctx.Message().(*protocol.PacingGrant); ok {
			grants <- g
		}
	}))
	ask := func(s string) *protocol.CredentialSelected {
		got, err := sys.Root.RequestFuture(pid, &protocol.SelectCredential{SessionId: s, Pace: true, Token: 1, Model: "p/m",
			ReplyTo: actors.Ref(session)}, 5*time.Second).Result()
		if err != nil {
			t.Fatal(err)
		}
		return got.(*protocol.CredentialSelected)
	}
	if got := ask("first"); got.GetWaitMs() != 0 || got.GetQueued() != 0 {
		t.Fatalf("first: %v; want its reservation and its place", got)
	}
	if got := ask("second"); got.GetWaitMs() == 0 {
		t.Fatalf("second: %v; want a wait for its reservation (the minute's request is spent)", got)
	}
	sys.Root.Send(pid, &protocol.PacingCancel{SessionId: "first", Token: 1}) // its request given back
	select {
	case g := <-grants:
		if g.GetSessionId() != "second" || g.GetCredential() != "A" {
			t.Errorf("grant %v; want second's on A", g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no PacingGrant reached the session through the router")
	}
	// The router seated the grant before it went on: first's place given
	// back, second's taken.
	if l := view.Loads()[overload.Key{Provider: "p", Model: "m"}]; l.InFlight != 1 || l.Limit != overload.DefaultInitial {
		t.Errorf("the view's load %+v; want 1 in flight (second), the limit at its start, %d (one member)", l, overload.DefaultInitial)
	}
}
