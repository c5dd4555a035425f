package musepi

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/provider"
)

// A message sent while the session's actor passivates is held, then keeps
// the actor: passivated says no and delivers it, in order, to the actor
// that stays.
func TestMessageHeldDuringPassivationKeepsTheActor(t *testing.T) {
	rt := internalRuntime(t, provider.NewScripted())
	s, err := rt.NewSession(context.Background(), WithModel("p/m"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Messages(context.Background()); err != nil { // starts the actor
		t.Fatal(err)
	}
	l := &s.local
	running := l.pid.Load()
	if !l.hold() {
		t.Fatal("hold refused")
	}
	if l.hold() {
		t.Error("a second hold accepted")
	}
	var got []*actor.PID
	for range 2 {
		if err := s.deliver(func(pid *actor.PID) { got = append(got, pid) }); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 0 {
		t.Fatalf("delivered %d messages while holding", len(got))
	}
	if l.passivated() {
		t.Fatal("passivated with messages held")
	}
	if len(got) != 2 || got[0] != running || got[1] != running || l.pid.Load() != running || l.holding {
		t.Fatalf("held messages went to %v (actor %v, still holding %t)", got, running, l.holding)
	}
}

// internalRuntime is a runtime with p as provider "p" (and opts), shut down when t
// ends.
func internalRuntime(t *testing.T, p provider.Provider, opts ...Option) *Runtime {
	t.Helper()
	rt, err := NewRuntime(append([]Option{WithProvider("p", p)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	return rt
}
