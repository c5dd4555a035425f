package session

// State is what a session is doing, its retry chain's phases included:
// one variable for the whole lifecycle. No prompt runs exactly when the
// state is Idle or CompactingOnRequest (Core.Busy); the retry chain is
// open exactly when its attempt is above 0 (Core.IsRetrying), whatever
// the state. Whether the session is with its actors is its Presence.
//
// Each state has its step function (stepIdle, stepStreaming, ...), which
// takes the inputs of that state; become sets both, as etcd-io/raft's
// becomeFollower sets r.step. The values keep the numbers of the states
// they replace (a node reports its sessions' states by number).
type State uint8

// The states of a session.
const (
	// Idle: no prompt runs.
	Idle State = iota
	// SelectingCredential: a turn waits for the credentials actor's
	// choice (a retry's continue, when the last turn failed).
	SelectingCredential
	// Streaming: a turn streams.
	Streaming
	// RunningTools: the tools of a turn run.
	RunningTools
	// AwaitingCredential: a turn's end hit a usage limit, and its
	// decision waits for the credentials actor to switch keys.
	AwaitingCredential
	// Backoff: the retry chain waits out its delay before its next
	// attempt.
	Backoff
	// AwaitingFallback: a turn's decision waits for the model-fallback
	// actor's next model.
	AwaitingFallback
	// Compacting: the compaction hook runs after a context overflow.
	Compacting
	// AwaitingBudget: a turn's decision waits for the provider's retry
	// budget to say when the retry may go.
	AwaitingBudget
	// CompactingOnRequest: the compaction hook runs between prompts, as
	// a caller asked (InCompact); no prompt runs meanwhile.
	CompactingOnRequest
)

var stateNames = [...]string{"idle", "selecting_credential", "streaming", "running_tools", "awaiting_credential",
	"backoff", "awaiting_fallback", "compacting", "awaiting_budget", "compacting_on_request"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// Phase is the state as the session's observers name it (Stats.ByPhase,
// the musepi.sessions metric, the golden scripts): the three questions a
// turn's decision may ask are one phase, "deciding".
// A compaction is one phase, "compacting", on an overflow or on request.
func (s State) Phase() string {
	switch {
	case s.asking():
		return "deciding"
	case s == CompactingOnRequest:
		return Compacting.String()
	}
	return s.String()
}

// atRest reports whether s is a state a record can carry: idle, or in a
// backoff (no turn, tools, compaction or ask to another actor in flight).
func (s State) atRest() bool { return s == Idle || s == Backoff }

// asking reports whether s waits for another actor's answer to the retry
// chain's question.
func (s State) asking() bool {
	return s == AwaitingCredential || s == AwaitingFallback || s == AwaitingBudget
}

// stepFunc is a state's step function: it takes the inputs of its state
// that Step does not take in every state.
type stepFunc func(c *Core, in Input)

// become makes s the session's state, with its step function.
func (c *Core) become(s State) {
	c.r.State = s
	switch s {
	case Idle:
		c.step = stepIdle
	case SelectingCredential:
		c.step = stepSelectingCredential
	case Streaming:
		c.step = stepStreaming
	case RunningTools:
		c.step = stepRunningTools
	case AwaitingCredential:
		c.step = stepAwaitingCredential
	case AwaitingFallback:
		c.step = stepAwaitingFallback
	case AwaitingBudget:
		c.step = stepAwaitingBudget
	case Backoff:
		c.step = stepBackoff
	case Compacting:
		c.step = stepCompacting
	case CompactingOnRequest:
		c.step = stepCompactingOnRequest
	}
}

func stepIdle(c *Core, in Input) {
	switch in.Kind {
	case InPrompt:
		c.prompt(in.Err)
	case InCredentialSelected:
		c.strayCredential(in)
	case InCompact:
		c.compactOnRequest()
	}
}

// stepBusy is what every state but Idle does with an input its own step
// function does not take.
func stepBusy(c *Core, in Input) {
	switch in.Kind {
	case InPrompt:
		res := c.out.results.add()
		*res = Result{Generation: c.r.Generation, ErrorKind: KindBusy,
			Error: "a prompt is already running; abort it or wait for it to settle"}
		c.add(RejectPrompt).Result = res
	case InCredentialSelected:
		c.strayCredential(in)
	case InAbort:
		c.abort()
	case InAbortRetry:
		c.cancelRetry()
	case InCompact:
		c.add(RejectCompaction).Error = "a prompt or a compaction is running"
	}
}

func stepSelectingCredential(c *Core, in Input) {
	if in.Kind == InCredentialSelected {
		c.credentialAnswer(in)
		return
	}
	stepBusy(c, in)
}

func stepStreaming(c *Core, in Input) {
	switch {
	case in.Kind == InTurnDelta && in.Turn == c.r.Turn:
		ev := c.emit(EventMessageUpdate)
		ev.DeltaKind, ev.Delta = in.DeltaKind, in.Delta
	case in.Kind == InRateLimits && in.Turn == c.r.Turn:
		c.rateLimitsSeen(in.Limits, in.At)
	case in.Kind == InTurnEnded && in.Turn == c.r.Turn:
		c.turnEnded(in.Message, in.Limits, in.Err)
	default:
		stepBusy(c, in)
	}
}

func stepRunningTools(c *Core, in Input) {
	if in.Kind == InToolsDone && in.Turn == c.r.Turn {
		c.toolsDone(in.Err, in.KeyFree)
		return
	}
	stepBusy(c, in)
}

func stepCompacting(c *Core, in Input) {
	if in.Kind == InCompactionDone && in.Generation == c.r.Generation {
		c.compactionDone(in.Context, in.Err)
		return
	}
	stepBusy(c, in)
}

// stepCompactingOnRequest takes the end of a compaction a caller asked
// for; a prompt waits for it (it is refused), and an abort has nothing to
// abort.
func stepCompactingOnRequest(c *Core, in Input) {
	switch in.Kind {
	case InCompactionDone:
		if in.Generation == c.r.Generation {
			c.compactedOnRequest(in.Context, in.Err)
		}
	case InPrompt:
		res := c.out.results.add()
		*res = Result{Generation: c.r.Generation, ErrorKind: KindBusy,
			Error: "the session is being compacted; wait for compact to answer"}
		c.add(RejectPrompt).Result = res
	case InCredentialSelected:
		c.strayCredential(in)
	case InCompact:
		c.add(RejectCompaction).Error = "a prompt or a compaction is running"
	}
}

func stepAwaitingCredential(c *Core, in Input) {
	if in.Kind == InCredentialReply {
		c.credentialReply(in)
		return
	}
	stepBusy(c, in)
}

func stepAwaitingFallback(c *Core, in Input) {
	if in.Kind != InFallbackReply {
		stepBusy(c, in)
		return
	}
	if in.Switched {
		c.r.PrimaryUntil = in.CooldownUntil // the primary may come back when its cooldown ends
	}
	if in.Token == c.r.Chain.Token {
		mark := len(c.out.list)
		c.fallbackReplied(in)
		c.decided(mark, false)
	}
}

func stepAwaitingBudget(c *Core, in Input) {
	if in.Kind != InBudgetGrant {
		stepBusy(c, in)
		return
	}
	if in.Token == c.r.Chain.Token {
		mark := len(c.out.list)
		c.budgetGranted(in.At)
		c.decided(mark, false)
	}
}

func stepBackoff(c *Core, in Input) {
	ch := &c.r.Chain
	switch {
	case in.Kind == InBackoffDone && in.Token == ch.Token && in.Generation == c.r.Generation:
		ch.HeldToken = 0 // the held retry goes out now: nothing left to drop
		c.continueDue(in.KeyFree)
	case in.Kind == InTimerLost: // its owner is gone: armed again for what is left
		c.armTimer(max(c.r.SleepUntil.Sub(c.now), 0))
	case in.Kind == InBudgetRelease && ch.HeldToken != 0 && in.Token == ch.HeldToken:
		c.budgetReleased(in.At)
	default:
		stepBusy(c, in)
	}
}
