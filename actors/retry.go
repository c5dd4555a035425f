package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
)

// RetryActor is the child of a session that owns its backoff timer: it
// arms it on ArmRetryTimer and stops it on CancelRetryTimer (an abort).
// When the timer fires, the retry's continue is scheduled with the
// session's post-prompt scheduler on the session's behalf, which sends the
// session TaskDue; so a plain attempt costs the session no message between
// the two. The retry decisions are the session core's; the timer's token
// ties a TaskDue to the backoff it ends, so a late one after a cancel or a
// restart is ignored there.
type RetryActor struct {
	deps  *Deps
	timer clock.Timer
	token uint64
}

// Receive handles ArmRetryTimer and CancelRetryTimer.
func (a *RetryActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.ArmRetryTimer:
		a.stop()
		session, root, clk, scheduler := ctx.Parent(), ctx.ActorSystem().Root, a.deps.Clock, a.deps.schedulerFor(m.GetSessionId())
		task := &messages.ScheduleTask{SessionId: m.GetSessionId(), Generation: m.GetGeneration(),
			DelayMs: m.GetContinueDelayMs(), Task: "continue", Token: m.GetToken()}
		a.token = m.GetToken()
		a.timer = clk.AfterFunc(time.Duration(m.GetDelayNs()), func() {
			clk.Begin()
			root.RequestWithCustomSender(scheduler, task, session)
		})
	case *messages.CancelRetryTimer:
		if m.GetToken() == a.token {
			a.stop()
		}
	case *actor.Stopping:
		a.stop()
	}
}

func (a *RetryActor) stop() {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}
