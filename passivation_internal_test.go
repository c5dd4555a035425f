package musepi

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/provider"
)

// A message sent while the session's actor passivates is buffered, then keeps
// the actor: passivated says no and delivers it, in order, to the actor
// that stays.
func TestMessageBufferedDuringPassivationKeepsTheActor(t *testing.T) {
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
	if !l.buffer() {
		t.Fatal("buffer refused")
	}
	if l.buffer() {
		t.Error("a second buffer accepted")
	}
	var got []*actor.PID
	for range 2 {
		if err := s.deliver(func(pid *actor.PID) { got = append(got, pid) }); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 0 {
		t.Fatalf("delivered %d messages while buffering", len(got))
	}
	if l.passivated() {
		t.Fatal("passivated with messages buffered")
	}
	if len(got) != 2 || got[0] != running || got[1] != running || l.pid.Load() != running || l.buffering {
		t.Fatalf("buffered messages went to %v (actor %v, still buffering %t)", got, running, l.buffering)
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
