package actors

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// Error kinds of PromptResult.
const (
	KindFailed          = "failed"
	KindBusy            = "busy"
	KindAborted         = "aborted"
	KindContextOverflow = "context_overflow"
	KindRetryCancelled  = "retry_cancelled"
	KindShutdown        = "shutdown"
)

// ShutdownError is the final error of a retry chain or prompt cut short by
// the session stopping.
const ShutdownError = "session shut down before the prompt settled"

// SessionActor owns one conversation: the runtime context (what is sent to
// the model) and the persisted history (what is kept), the prompt
// generation, the abort flags and the event stream. It runs turns through a
// provider and tools, hands each turn's end to its retry child, and answers
// the Prompt call once all of the prompt's work has settled.
type SessionActor struct {
	deps *Deps
	cfg  SessionConfig

	retryPID *actor.PID
	stopped  bool   // Stopping was received
	model    string // "provider/model" in use
	pinned   bool   // the fallback model is pinned (refusal)
	// primaryCooldownUntilMs is when the primary model may be restored.
	primaryCooldownUntilMs int64
	credential             string

	runtime    []*messages.Entry
	historySeq uint64
	eventSeq   uint64

	generation   uint64
	waiter       *actor.PID // the Prompt call's future
	promptActive bool
	startPending bool // a turn waits for the credential
	continuing   bool // the waiting turn is a retry's scheduled continue
	turn         uint64
	cancelTurn   context.CancelFunc
	turnActive   bool
	toolsActive  bool
	compacting   bool
	// compactWaiter is the caller of a manual compaction in progress.
	compactWaiter *actor.PID
	deciding      bool // a RetryTurnEnded awaits its decision
	// toolsAfterDecision are the calls of a successful tool-use turn that
	// ended while a retry chain was open: they run once the decision (the
	// chain's successful end) is applied.
	toolsAfterDecision []*messages.ToolCall
	// settingsProto is cfg.Settings on the wire, built once per change: the
	// retry child reuses its decoding while the pointer stays the same.
	settingsProto *messages.RetrySettings
	lifecycleOpen bool
	attempt       int32 // of the last auto_retry_start in the open chain
	tasksPending  bool
	aborts        retry.AbortState
	last          *messages.AssistantMessage
	failure       string // final error text of the prompt
	failureKind   string
}

// SessionProps spawns a session actor.
func SessionProps(deps *Deps, cfg SessionConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &SessionActor{deps: deps, cfg: cfg}
	}, deps.propsOptions()...)
}

// Receive handles the session's messages.
func (s *SessionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.started(ctx)
	case *messages.PromptRequest:
		s.prompt(ctx, m)
	case *messages.CredentialSelected:
		s.credential = m.GetCredential()
		if !s.startPending {
			break
		}
		s.startPending = false
		if s.aborts.User || (s.continuing && !s.lifecycleOpen) {
			s.maybeSettle(ctx) // aborted, or the retry was cancelled, while the credential was chosen
			break
		}
		s.startTurn(ctx)
	case *messages.TurnDelta:
		if m.GetTurn() == s.turn && s.turnActive {
			s.emit(&messages.MessageUpdate{Kind: m.GetKind(), Delta: m.GetText()})
		}
	case *messages.TurnFinished:
		if m.GetTurn() == s.turn && s.turnActive {
			s.turnFinished(ctx, m.GetMessage())
		}
	case *messages.ToolsFinished:
		if m.GetTurn() == s.turn && s.toolsActive {
			s.toolsFinished(ctx, m)
		}
	case *messages.RetryDecision:
		s.decision(ctx, m)
	case *messages.TaskDue:
		s.taskDue(ctx, m)
	case *messages.GenerationIdle:
		if m.GetGeneration() == s.generation {
			s.tasksPending = false
			s.maybeSettle(ctx)
		}
	case *messages.CompactionFinished:
		if m.GetManual() {
			s.manualCompactionFinished(ctx, m)
			break
		}
		s.compactionFinished(ctx, m)
	case *messages.CompactRequest:
		s.manualCompact(ctx)
	case *messages.AbortRequest:
		switch {
		case !s.promptActive:
		case m.GetEditGuard():
			s.aborts.EditGuard = true
			s.failureKind, s.failure = KindAborted, "stream aborted by the streaming-edit guard"
			if s.cancelTurn != nil {
				s.cancelTurn()
			}
		default:
			s.aborts.User = true
			s.failureKind = KindAborted
			track.Send(ctx, s.deps.Clock, s.retryPID, &messages.RetryCancel{Global: true})
		}
		ctx.Respond(&messages.Ack{})
	case *messages.AbortRetryRequest:
		track.Send(ctx, s.deps.Clock, s.retryPID, &messages.RetryCancel{})
		ctx.Respond(&messages.Ack{})
	case *messages.SetAutoRetryRequest:
		s.cfg.Settings.Enabled = m.GetEnabled()
		s.settingsProto = nil
		s.cfg.State.autoRetry.Store(m.GetEnabled())
		ctx.Respond(&messages.Ack{})
	case *messages.SetModelRequest:
		ctx.Respond(s.setModel(m.GetModel()))
	case *messages.MessagesRequest:
		ctx.Respond(s.messages(m.GetHistory()))
	case *actor.Terminated:
		if !s.stopped && m.GetWho().Equal(s.retryPID) {
			s.retryFailed(ctx)
		}
	case *actor.Stopping:
		s.stopped = true
		s.stopping(ctx)
	}
}

// retryFailed handles a retry child that supervision gave up on (it kept
// panicking): the open chain ends with auto_retry_end{success:false}, a
// pending decision settles without a retry, and a fresh child takes over.
func (s *SessionActor) retryFailed(ctx actor.Context) {
	const reason = "retry actor failed repeatedly; retry chain ended"
	s.deps.Log.Error().Str("session", s.cfg.ID).Msg(reason)
	s.spawnRetry(ctx, s.newSource())
	calls := s.toolsAfterDecision
	s.toolsAfterDecision = nil
	if s.deciding {
		s.deciding = false
		if calls == nil {
			s.emit(&messages.AgentEnd{Message: s.last, WillRetry: false})
		}
	}
	if s.lifecycleOpen {
		s.lifecycleOpen = false
		s.cfg.State.retrying.Store(false)
		final := reason
		s.emit(&messages.AutoRetryEnd{Success: false, Attempt: s.attempt, FinalError: &final})
	}
	if calls != nil {
		s.runTools(ctx, calls) // the turn itself succeeded: its tools still run
		return
	}
	if s.promptActive && s.failure == "" {
		s.failure = reason
	}
	s.tasksPending = false
	s.maybeSettle(ctx)
}

func (s *SessionActor) started(ctx actor.Context) {
	s.model = s.cfg.Model
	s.cfg.State.Init(s.cfg.Model, s.cfg.Settings.Enabled)
	s.spawnRetry(ctx, s.newSource())
	s.restore()
}

// newSource is the jitter source of a retry child.
func (s *SessionActor) newSource() retry.Source {
	if s.deps.NewSource != nil {
		return s.deps.NewSource()
	}
	seed := rand.Uint64()
	return rand.New(rand.NewPCG(seed, seed>>1))
}

// spawnRetry starts the retry child; its state survives restarts of the
// actor after a panic (see RetryActor).
func (s *SessionActor) spawnRetry(ctx actor.Context, src retry.Source) {
	st := newRetryState(s.deps, s.cfg.ID, src)
	s.retryPID = ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return &RetryActor{st} }, s.deps.propsOptions()...))
}

// restore loads the persisted history: the runtime context is rebuilt from
// it without the failed turns (which were stripped when retried) and
// without model-change entries.
func (s *SessionActor) restore() {
	entries, err := s.deps.Store.Load(s.cfg.ID)
	if err != nil {
		s.deps.Log.Error().Err(err).Str("session", s.cfg.ID).Msg("load history")
		return
	}
	for _, e := range entries {
		s.historySeq = max(s.historySeq, e.GetSeq())
		if a := e.GetAssistant(); a != nil && isFailure(a) {
			continue
		}
		if e.GetModelChange() != nil {
			continue
		}
		s.runtime = append(s.runtime, e)
	}
}

func (s *SessionActor) prompt(ctx actor.Context, m *messages.PromptRequest) {
	if s.compactWaiter != nil {
		ctx.Respond(&messages.PromptResult{Generation: s.generation, ErrorKind: KindBusy,
			Error: "the session is being compacted; wait for compact to answer"})
		return
	}
	if s.promptActive {
		ctx.Respond(&messages.PromptResult{Generation: s.generation, ErrorKind: KindBusy,
			Error: "a prompt is already running; abort it or wait for it to settle"})
		return
	}
	s.generation++
	s.cfg.State.generation.Store(s.generation)
	s.cfg.State.busy.Store(true)
	track.Request(ctx, s.deps.Clock, s.deps.Scheduler, &messages.SetGeneration{SessionId: s.cfg.ID, Generation: s.generation})
	s.waiter = ctx.Sender()
	s.promptActive = true
	s.aborts = retry.AbortState{}
	s.last, s.failure, s.failureKind = nil, "", ""
	s.tasksPending = true // until the scheduler confirms the new generation is idle
	s.maybeRevert()
	user := &messages.UserMessage{Text: m.GetText(), TimestampMs: s.deps.Clock.Now().UnixMilli()}
	s.append(&messages.Entry{Entry: &messages.Entry_User{User: user}}, true)
	s.emit(&messages.AgentStart{Generation: s.generation, User: user})
	s.continuing = false
	s.startWithCredential(ctx)
}

// startWithCredential starts a turn once the credentials actor has said
// which credential to use: the sticky one, or a free one when it is
// blocked. A provider without credentials starts at once.
func (s *SessionActor) startWithCredential(ctx actor.Context) {
	pid := s.deps.Credentials[providerOf(s.model)]
	if pid == nil {
		s.credential = ""
		s.startTurn(ctx)
		return
	}
	s.startPending = true
	track.Request(ctx, s.deps.Clock, pid, &messages.SelectCredential{SessionId: s.cfg.ID})
}

// append adds e to the history, and to the runtime context when toRuntime.
func (s *SessionActor) append(e *messages.Entry, toRuntime bool) {
	s.historySeq++
	e.Seq = s.historySeq
	if err := s.deps.Store.Append(s.cfg.ID, e); err != nil {
		s.deps.Log.Error().Err(err).Str("session", s.cfg.ID).Msg("append history")
	}
	if toRuntime {
		s.runtime = append(s.runtime, e)
	}
}

// emit publishes one event to the subscribers.
func (s *SessionActor) emit(payload proto.Message) {
	s.eventSeq++
	if !s.cfg.Events.HasSubscribers() {
		return // nobody listens: skip building the event (its seq is spent)
	}
	ev := &messages.SessionEvent{SessionId: s.cfg.ID, Seq: s.eventSeq, TimeMs: s.deps.Clock.Now().UnixMilli()}
	switch p := payload.(type) {
	case *messages.AutoRetryStart:
		ev.Event = &messages.SessionEvent_AutoRetryStart{AutoRetryStart: p}
	case *messages.AutoRetryEnd:
		ev.Event = &messages.SessionEvent_AutoRetryEnd{AutoRetryEnd: p}
	case *messages.RetryFallbackApplied:
		ev.Event = &messages.SessionEvent_RetryFallbackApplied{RetryFallbackApplied: p}
	case *messages.RetryFallbackSucceeded:
		ev.Event = &messages.SessionEvent_RetryFallbackSucceeded{RetryFallbackSucceeded: p}
	case *messages.ModelChange:
		ev.Event = &messages.SessionEvent_ModelChange{ModelChange: p}
	case *messages.AgentStart:
		ev.Event = &messages.SessionEvent_AgentStart{AgentStart: p}
	case *messages.AgentEnd:
		ev.Event = &messages.SessionEvent_AgentEnd{AgentEnd: p}
	case *messages.AgentSettled:
		ev.Event = &messages.SessionEvent_AgentSettled{AgentSettled: p}
	case *messages.MessageUpdate:
		ev.Event = &messages.SessionEvent_MessageUpdate{MessageUpdate: p}
	case *messages.MessageEnd:
		ev.Event = &messages.SessionEvent_MessageEnd{MessageEnd: p}
	case *messages.CompactionRequired:
		ev.Event = &messages.SessionEvent_CompactionRequired{CompactionRequired: p}
	case *messages.ToolExecutionStart:
		ev.Event = &messages.SessionEvent_ToolExecutionStart{ToolExecutionStart: p}
	case *messages.ToolExecutionEnd:
		ev.Event = &messages.SessionEvent_ToolExecutionEnd{ToolExecutionEnd: p}
	case *messages.CredentialSwitch:
		ev.Event = &messages.SessionEvent_CredentialSwitch{CredentialSwitch: p}
	case *messages.SteeringDelivered:
		ev.Event = &messages.SessionEvent_SteeringDelivered{SteeringDelivered: p}
	default:
		panic(fmt.Sprintf("actors: emit of unknown event %T", payload))
	}
	s.cfg.Events.Publish(ev)
}

func (s *SessionActor) setModel(model string) *messages.Ack {
	prov, _, ok := retry.SplitModel(model)
	if !ok {
		return &messages.Ack{Error: fmt.Sprintf("model %q: want \"provider/model\"", model)}
	}
	if _, ok := s.deps.Providers[prov]; !ok {
		return &messages.Ack{Error: fmt.Sprintf("model %q: unknown provider %q", model, prov)}
	}
	s.cfg.Model = model
	s.pinned = false
	s.switchModel(model, "user")
	return &messages.Ack{}
}

// switchModel changes the model in use and records a model_change entry.
func (s *SessionActor) switchModel(to, reason string) {
	if to == s.model {
		return
	}
	change := &messages.ModelChange{From: s.model, To: to, Role: s.cfg.Role, Reason: reason}
	s.model = to
	s.cfg.State.model.Store(&to)
	s.append(&messages.Entry{Entry: &messages.Entry_ModelChange{ModelChange: change}}, false)
	s.emit(change)
}

// maybeRevert restores the primary model (cooldown-expiry policy) once its
// cooldown is over, unless the fallback is pinned. It runs before each new
// prompt and each scheduled continue.
func (s *SessionActor) maybeRevert() {
	if s.model == s.cfg.Model || s.pinned || s.cfg.Settings.FallbackRevertPolicy != retry.RevertCooldownExpiry {
		return
	}
	if s.deps.Clock.Now().UnixMilli() < s.primaryCooldownUntilMs {
		return
	}
	s.switchModel(s.cfg.Model, "revert")
}

func (s *SessionActor) messages(history bool) *messages.MessagesReply {
	if !history {
		out := make([]*messages.Entry, len(s.runtime))
		for i, e := range s.runtime {
			out[i] = proto.Clone(e).(*messages.Entry)
		}
		return &messages.MessagesReply{Entries: out}
	}
	entries, err := s.deps.Store.Load(s.cfg.ID)
	if err != nil {
		s.deps.Log.Error().Err(err).Str("session", s.cfg.ID).Msg("load history")
	}
	return &messages.MessagesReply{Entries: entries}
}

// stopping ends the session: the stream is cancelled, an open retry chain
// ends with auto_retry_end{success:false}, and a waiting Prompt returns a
// shutdown error after agent_settled.
func (s *SessionActor) stopping(ctx actor.Context) {
	s.aborts.Dispose = true
	if s.cancelTurn != nil {
		s.cancelTurn()
	}
	if s.lifecycleOpen {
		s.lifecycleOpen = false
		final := ShutdownError
		s.emit(&messages.AutoRetryEnd{Success: false, Attempt: s.attempt, FinalError: &final})
	}
	creds, budget := s.deps.Credentials[providerOf(s.model)], s.deps.Budgets[providerOf(s.model)]
	if creds != nil {
		track.Send(ctx, s.deps.Clock, creds, &messages.ReleaseSession{SessionId: s.cfg.ID})
	}
	if budget != nil && budget != creds {
		track.Send(ctx, s.deps.Clock, budget, &messages.ReleaseSession{SessionId: s.cfg.ID})
	}
	track.Send(ctx, s.deps.Clock, s.deps.Scheduler, &messages.Forget{SessionId: s.cfg.ID})
	s.cfg.State.retrying.Store(false)
	if s.promptActive {
		s.promptActive = false
		s.cfg.State.busy.Store(false)
		s.emit(&messages.AgentSettled{Generation: s.generation, Success: false, Error: ShutdownError})
		ctx.Send(s.waiter, &messages.PromptResult{Generation: s.generation, ErrorKind: KindShutdown,
			Error: ShutdownError, Message: s.last})
	}
}

func isFailure(m *messages.AssistantMessage) bool {
	r := m.GetStopReason()
	return r == messages.StopReason_STOP_REASON_ERROR || r == messages.StopReason_STOP_REASON_ABORTED
}
