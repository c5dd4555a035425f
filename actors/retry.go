package actors

import (
	"log/slog"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/internal/track"
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
	deps    *Deps
	session *actor.PID
	timer   clock.Timer
	token   uint64
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
		a.stop()
		session, root, clk, scheduler := a.session, ctx.ActorSystem().Root, a.deps.Clock, a.deps.schedulerFor(m.GetSessionId())
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
