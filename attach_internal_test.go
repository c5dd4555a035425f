package musepi

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/session"
)

// An attach to a running prompt whose own caller waits is refused, unless
// it names the own caller's reply address as the one it replaces: that is
// the prompt's handle, which gave the address up (its node left the
// cluster and came back on the same address). The attach then gets the
// result, and the address given up is told that another caller attached.
func TestAttachReplacesTheOwnCallerOnlyWhenNamed(t *testing.T) {
	p := provider.NewScripted()
	rt := internalRuntime(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := rt.NewSession(ctx, WithModel("p/m"))
	if err != nil {
		t.Fatal(err)
	}
	p.SetScript(s.ID(), provider.Outcome{Block: true})
	request := func(msg interface{}, timeout time.Duration) *actor.Future {
		f := actor.NewFuture(rt.system, timeout)
		if err := s.deliver(func(pid *actor.PID) { rt.system.Root.RequestWithCustomSender(pid, msg, f.PID()) }); err != nil {
			t.Fatal(err)
		}
		return f
	}
	own := request(&protocol.PromptRequest{Text: "hi"}, 3*time.Second)
	for !s.Busy() {
		time.Sleep(time.Millisecond)
	}

	res, err := request(&protocol.AttachPrompt{}, 5*time.Second).Result()
	if r, ok := res.(*protocol.PromptResult); err != nil || !ok || r.GetErrorKind() != string(session.KindBusy) {
		t.Fatalf("attach naming nobody = %v, %v; want the %s refusal", res, err, string(session.KindBusy))
	}
	replacing := request(&protocol.AttachPrompt{ReplacesAddress: own.PID().GetAddress(), ReplacesId: own.PID().GetId()}, 5*time.Second)
	s.Abort()
	res, err = replacing.Result()
	if r, ok := res.(*protocol.PromptResult); err != nil || !ok || r.GetErrorKind() != string(session.KindAborted) {
		t.Fatalf("attach replacing the own caller = %v, %v; want the aborted prompt's result", res, err)
	}
	if res, err := own.Result(); err != nil || res.(*protocol.PromptResult).GetErrorKind() != string(session.KindBusy) {
		t.Errorf("the address given up got %v, %v; want told another caller attached", res, err)
	}
}
