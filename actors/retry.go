package actors

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
)

// RetryActor is the child of a session that owns its backoff timer: on
// ArmRetryTimer, which names the session, it arms one clock timer for the
// wait and the retry's continue that follows it (spec 3: delayMs 1), which
// sends the session TaskDue when both have passed; on CancelRetryTimer (an
// abort) it stops the timer. A plain attempt so costs one message to the
// child and one from its timer. The retry decisions are the session
// core's; the token ties a TaskDue to the backoff it ends, so a late one
// after a cancel or a restart is ignored there.
type RetryActor struct {
	deps  *Deps
	timer clock.Timer // the backoff's, while it runs
	token uint64      // the backoff the timer ends
}

// retryName ends the session actor's name in its retry child's:
// "<session actor><retryName><unique>".
const retryName = "/retry"

// retryGuardian supervises the retry children: one that panics is
// stopped, not restarted, and its session told (RetryStopped, counted on
// the clock before the panicked message stops counting, so a virtual
// clock does not move meanwhile); the session then starts a new one from
// its core's state (InTimerLost). The session is the one the
// ArmRetryTimer that panicked names (a panic on any other message leaves
// no timer armed to lose).
type retryGuardian struct{ clk clock.Clock }

// HandleFailure tells the child's session and stops the child.
func (g retryGuardian) HandleFailure(sys *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, message interface{}) {
	sys.Logger().Error("retry child panicked; stopping it", slog.String("child", child.GetId()), slog.Any("reason", reason))
	if arm, ok := actor.UnwrapEnvelopeMessage(message).(*messages.ArmRetryTimer); ok && arm.GetSession() != nil {
		track.Send(sys.Root, g.clk, PID(arm.GetSession()), &messages.RetryStopped{ChildId: child.GetId()})
	}
	supervisor.StopChildren(child)
}

// Receive handles ArmRetryTimer and CancelRetryTimer.
func (a *RetryActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.ArmRetryTimer:
		a.stop()
		clk, root, session := a.deps.Clock, ctx.ActorSystem().Root, PID(m.GetSession())
		due := &messages.TaskDue{Generation: m.GetGeneration(), Task: "continue", Token: m.GetToken()}
		wait := time.Duration(m.GetDelayNs()) + time.Duration(m.GetContinueDelayMs())*time.Millisecond
		a.token = m.GetToken()
		a.timer = clk.AfterFunc(wait, func() { track.Send(root, clk, session, due) })
	case *messages.CancelRetryTimer:
		if m.GetToken() == a.token {
			a.stop()
		}
	case *actor.Stopping:
		a.stop()
	}
}

// stop stops the backoff timer, if it runs.
func (a *RetryActor) stop() {
	if a.timer != nil {
		a.timer.Stop()
		a.timer, a.token = nil, 0
	}
}
