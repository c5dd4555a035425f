package actors

import (
	"log/slog"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
)

// RetryActor is the child of a session that owns its backoff: on
// ArmRetryTimer it hands the wait, and the retry's continue that follows
// it (spec 3: scheduled with the post-prompt scheduler, delayMs 1), to the
// session's scheduler as one task, which sends the session TaskDue once
// both have passed; on CancelRetryTimer (an abort) it takes the task back.
// A waiting session so costs one entry in its scheduler's queue and no
// timer of its own, and a plain attempt no message between the two. The
// retry decisions are the session core's; the token ties a TaskDue to the
// backoff it ends, so a late one after a cancel or a restart is ignored
// there.
type RetryActor struct {
	deps      *Deps
	session   *actor.PID
	sessionID string
	token     uint64 // the backoff handed to the scheduler (0: none)
}

// retrySuffix ends the session actor's name in its retry child's:
// "<session actor><retrySuffix><unique>".
const retrySuffix = "/retry"

// sessionOf is the session actor of the retry child pid.
func sessionOf(pid *actor.PID) *actor.PID {
	i := strings.LastIndex(pid.GetId(), retrySuffix)
	if i < 0 {
		return nil
	}
	return actor.NewPID(pid.GetAddress(), pid.GetId()[:i])
}

// retryGuardian supervises the retry children: one that panics is
// stopped, not restarted, and its session told (RetryStopped, counted on
// the clock before the panicked message stops counting, so a virtual
// clock does not move meanwhile); the session then starts a new one from
// its core's state (InTimerLost).
type retryGuardian struct{ clk clock.Clock }

// HandleFailure tells the child's session and stops the child.
func (g retryGuardian) HandleFailure(sys *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ interface{}) {
	sys.Logger().Error("retry child panicked; stopping it", slog.String("child", child.GetId()), slog.Any("reason", reason))
	if session := sessionOf(child); session != nil {
		track.Send(sys.Root, g.clk, session, &messages.RetryStopped{ChildId: child.GetId()})
	}
	supervisor.StopChildren(child)
}

// Receive handles ArmRetryTimer and CancelRetryTimer.
func (a *RetryActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.session = sessionOf(ctx.Self())
	case *messages.ArmRetryTimer:
		a.sessionID, a.token = m.GetSessionId(), m.GetToken()
		// From the session, so that the scheduler answers it.
		clk := a.deps.Clock
		clk.Begin()
		ctx.RequestWithCustomSender(a.deps.schedulerFor(a.sessionID), &messages.ScheduleTask{SessionId: a.sessionID,
			Generation: m.GetGeneration(), SleepNs: m.GetDelayNs(), DelayMs: m.GetContinueDelayMs(), Task: "continue", Token: a.token}, a.session)
	case *messages.CancelRetryTimer:
		if m.GetToken() == a.token {
			a.cancel(ctx)
		}
	case *actor.Stopping:
		a.cancel(ctx)
	}
}

// cancel takes the backoff back from the scheduler, if it still holds it.
func (a *RetryActor) cancel(ctx actor.Context) {
	if a.token != 0 {
		track.Send(ctx, a.deps.Clock, a.deps.schedulerFor(a.sessionID), &messages.Forget{SessionId: a.sessionID, Token: a.token})
		a.token = 0
	}
}
