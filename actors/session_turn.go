package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"

	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// startTurn streams one turn on the current model in its own goroutine;
// deltas and the final message come back as TurnDelta and TurnFinished.
func (s *SessionActor) startTurn(ctx actor.Context) {
	prov := s.deps.Providers[providerOf(s.model)]
	s.turn++
	s.turnActive = true
	if prov == nil {
		s.turnFinished(ctx, provider.Failure(0, fmt.Sprintf("no provider %q for model %q", providerOf(s.model), s.model), nil))
		return
	}
	turnCtx, cancelCause := context.WithCancelCause(context.Background())
	cancel := func() { cancelCause(context.Canceled) }
	s.cancelTurn = cancel
	req := provider.Request{
		SessionID:  s.cfg.ID,
		Model:      modelOf(s.model),
		Credential: s.credential,
		APIKey:     s.deps.Keys[providerOf(s.model)][s.credential],
		Context:    append([]*messages.Entry(nil), s.runtime...),
		Tools:      s.toolSpecs(),
		Thinking:   s.cfg.State.ThinkingLevel(),
	}
	clk, root, self, turn := s.deps.Clock, ctx.ActorSystem().Root, ctx.Self(), s.turn
	watchdog := newWatchdog(clk, s.deps.StreamIdleTimeout, cancelCause)
	clk.Begin()
	go func() {
		defer clk.End()
		defer cancel()
		watchdog.arm()
		msg := streamContained(turnCtx, prov, req, func(d provider.Delta) {
			watchdog.arm()
			track.Send(root, clk, self, &messages.TurnDelta{Turn: turn, Kind: d.Kind, Text: d.Text})
		})
		watchdog.stop()
		if errors.Is(context.Cause(turnCtx), errStreamStalled) {
			msg = stalled(msg, s.deps.StreamIdleTimeout)
		}
		track.Send(root, clk, self, &messages.TurnFinished{Turn: turn, Message: msg})
	}()
}

// errStreamStalled is the cause a turn is cancelled with by its watchdog.
var errStreamStalled = errors.New("stream stalled")

// watchdog cancels a stream that sends nothing for idle (off when idle <= 0).
// arm and stop are called from the stream's goroutine only.
type watchdog struct {
	clk    clock.Clock
	idle   time.Duration
	cancel context.CancelCauseFunc
	timer  clock.Timer
}

func newWatchdog(clk clock.Clock, idle time.Duration, cancel context.CancelCauseFunc) *watchdog {
	return &watchdog{clk: clk, idle: idle, cancel: cancel}
}

// arm (re)starts the idle countdown.
func (w *watchdog) arm() {
	if w.idle <= 0 {
		return
	}
	w.stop()
	w.timer = w.clk.AfterFunc(w.idle, func() { w.cancel(errStreamStalled) })
}

func (w *watchdog) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// stalled turns the aborted result of a stream its watchdog ended into a
// transient "stream stalled" error, keeping what had streamed; with
// observable output it is marked stream_interrupted_after_content, so the
// policy does not replay it.
func stalled(msg *messages.AssistantMessage, idle time.Duration) *messages.AssistantMessage {
	out := &messages.AssistantMessage{
		Content:      msg.GetContent(),
		StopReason:   messages.StopReason_STOP_REASON_ERROR,
		ErrorMessage: fmt.Sprintf("stream stalled: no data for %s", idle),
		Provider:     msg.GetProvider(),
		Model:        msg.GetModel(),
	}
	if retry.HasObservableOutput(out) {
		out.StopDetails = &messages.StopDetails{Type: retry.StopDetailStreamInterruptedAfterContent}
	}
	return out
}

// streamContained runs one provider call; a panic in the adapter becomes a
// failed turn instead of a crash.
func streamContained(ctx context.Context, prov provider.Provider, req provider.Request, onDelta func(provider.Delta)) (msg *messages.AssistantMessage) {
	defer func() {
		if r := recover(); r != nil {
			msg = provider.Failure(0, fmt.Sprintf("provider panicked: %v", r), nil)
		}
	}()
	msg = prov.Stream(ctx, req, onDelta)
	if msg == nil {
		msg = provider.Failure(0, "provider returned no message", nil)
	}
	return provider.ValidUTF8(msg)
}

func (s *SessionActor) toolSpecs() []provider.ToolSpec {
	if len(s.deps.Tools) == 0 {
		return nil
	}
	out := make([]provider.ToolSpec, len(s.deps.Tools))
	for i, t := range s.deps.Tools {
		out[i] = provider.ToolSpec{Name: t.Name, Description: t.Description, SchemaJSON: t.SchemaJSON}
	}
	return out
}

func (s *SessionActor) turnFinished(ctx actor.Context, msg *messages.AssistantMessage) {
	s.turnActive = false
	s.cancelTurn = nil
	if msg.GetTimestampMs() == 0 {
		msg.TimestampMs = s.deps.Clock.Now().UnixMilli()
	}
	// The provider is the configured name the model selector uses ("fake"),
	// not the adapter's wire kind ("openai").
	msg.Provider = providerOf(s.model)
	if msg.GetModel() == "" {
		msg.Model = modelOf(s.model)
	}
	s.last = msg
	s.append(&messages.Entry{Entry: &messages.Entry_Assistant{Assistant: msg}}, true)
	s.emit(&messages.MessageEnd{Message: msg})
	if calls := toolCalls(msg); len(calls) > 0 && !isFailure(msg) && !s.aborts.User {
		if s.lifecycleOpen {
			// Spec 3, "What resets the counter": a tool-use message is a
			// successful assistant message, so it ends the open chain
			// (auto_retry_end {success: true}) before its tools run.
			s.toolsAfterDecision = calls
			s.agentEnd(ctx, msg)
			return
		}
		s.runTools(ctx, calls)
		return
	}
	s.agentEnd(ctx, msg)
}

// agentEnd hands the turn's last message to the retry child: the end of the
// agent run, or a tool-use message of a loop while a chain is open.
func (s *SessionActor) agentEnd(ctx actor.Context, msg *messages.AssistantMessage) {
	s.deciding = true
	ab := s.aborts
	track.Send(ctx, s.deps.Clock, s.retryPID, &messages.RetryTurnEnded{
		Message:      msg,
		Generation:   s.generation,
		Aborts:       &messages.Aborts{User: ab.User, Dispose: ab.Dispose, EditGuard: ab.EditGuard},
		Settings:     s.wireSettings(),
		CurrentModel: s.model,
		PrimaryModel: s.cfg.Model,
		Role:         s.cfg.Role,
	})
}

// wireSettings is the session's retry settings as sent to the retry child.
func (s *SessionActor) wireSettings() *messages.RetrySettings {
	if s.settingsProto == nil {
		s.settingsProto = s.cfg.Settings.Proto()
	}
	return s.settingsProto
}

func toolCalls(msg *messages.AssistantMessage) []*messages.ToolCall {
	var out []*messages.ToolCall
	for _, b := range msg.GetContent() {
		if c := b.GetToolCall(); c != nil {
			out = append(out, c)
		}
	}
	return out
}

// runTools runs the turn's tool calls in order in one goroutine.
func (s *SessionActor) runTools(ctx actor.Context, calls []*messages.ToolCall) {
	s.toolsActive = true
	tools := map[string]Tool{}
	for _, t := range s.deps.Tools {
		tools[t.Name] = t
	}
	for _, c := range calls {
		s.emit(&messages.ToolExecutionStart{Call: c})
	}
	toolCtx, cancel := context.WithCancel(context.Background())
	s.cancelTurn = cancel
	clk, root, self, turn := s.deps.Clock, ctx.ActorSystem().Root, ctx.Self(), s.turn
	clk.Begin()
	go func() {
		defer clk.End()
		defer cancel()
		results := make([]*messages.ToolResult, 0, len(calls))
		for _, c := range calls {
			results = append(results, runTool(toolCtx, tools, c))
		}
		track.Send(root, clk, self, &messages.ToolsFinished{Turn: turn, Results: results})
	}()
}

// runTool runs one call; an unknown tool, an error or a panic becomes an
// error result for the model to read.
func runTool(ctx context.Context, tools map[string]Tool, c *messages.ToolCall) (res *messages.ToolResult) {
	res = &messages.ToolResult{ToolCallId: c.GetId(), Name: c.GetName()}
	t, ok := tools[c.GetName()]
	if !ok {
		res.Output, res.IsError = fmt.Sprintf("unknown tool %q", c.GetName()), true
		return res
	}
	defer func() {
		if r := recover(); r != nil {
			res.Output, res.IsError = fmt.Sprintf("tool %q panicked: %v", c.GetName(), r), true
		}
	}()
	out, err := t.Run(ctx, c.GetArgumentsJson())
	if err != nil {
		res.Output, res.IsError = err.Error(), true
		return res
	}
	res.Output = out
	return res
}

func (s *SessionActor) toolsFinished(ctx actor.Context, m *messages.ToolsFinished) {
	s.toolsActive = false
	s.cancelTurn = nil
	now := s.deps.Clock.Now().UnixMilli()
	for _, r := range m.GetResults() {
		r.TimestampMs = now
		s.append(&messages.Entry{Entry: &messages.Entry_ToolResult{ToolResult: r}}, true)
		s.emit(&messages.ToolExecutionEnd{Result: r})
	}
	if s.aborts.User {
		s.agentEnd(ctx, s.last)
		return
	}
	s.deliverSteering()
	s.startTurn(ctx)
}

// deliverSteering adds the waiting steering messages to the conversation,
// between a turn's tool results and the next turn.
func (s *SessionActor) deliverSteering() {
	if s.cfg.Steering == nil {
		return
	}
	for _, text := range s.cfg.Steering() {
		user := &messages.UserMessage{Text: text, TimestampMs: s.deps.Clock.Now().UnixMilli()}
		s.append(&messages.Entry{Entry: &messages.Entry_User{User: user}}, true)
		s.emit(&messages.SteeringDelivered{User: user})
	}
}

// decision applies what the retry child decided, in order. A settled
// decision answers the turn's end: agent_end goes out first, carrying
// whether a retry chain continues.
//
// The decision on a tool-use message inside a loop is no agent_end: once it
// is applied, the loop goes on with the message's tools.
func (s *SessionActor) decision(ctx actor.Context, d *messages.RetryDecision) {
	var calls []*messages.ToolCall
	if d.GetSettled() {
		s.deciding = false
		calls, s.toolsAfterDecision = s.toolsAfterDecision, nil
		if calls == nil {
			s.emit(&messages.AgentEnd{Message: s.last, WillRetry: d.GetWillRetry()})
		}
	}
	for _, a := range d.GetActions() {
		s.apply(ctx, a)
	}
	switch {
	case calls == nil:
		s.maybeSettle(ctx)
	case s.aborts.User:
		s.agentEnd(ctx, s.last) // aborted before the tools ran
	default:
		s.runTools(ctx, calls)
	}
}

func (s *SessionActor) apply(ctx actor.Context, a *messages.RetryAction) {
	switch a.GetKind() {
	case messages.RetryAction_KIND_LIFECYCLE_OPEN:
		s.lifecycleOpen = true
		s.cfg.State.retrying.Store(true)
	case messages.RetryAction_KIND_LIFECYCLE_CLOSE:
		s.lifecycleOpen = false
		s.cfg.State.retrying.Store(false)
	case messages.RetryAction_KIND_EMIT_START:
		s.attempt = a.GetStart().GetAttempt()
		s.emit(a.GetStart())
	case messages.RetryAction_KIND_EMIT_END:
		end := a.GetEnd()
		if !end.GetSuccess() {
			s.failure = end.GetFinalError()
			if s.failure == "Retry cancelled" && s.failureKind == "" {
				s.failureKind = KindRetryCancelled
			}
		}
		s.emit(end)
	case messages.RetryAction_KIND_FALLBACK_APPLIED:
		s.pinned = a.GetPinned()
		s.primaryCooldownUntilMs = a.GetPrimaryCooldownUntilMs()
		s.switchModel(a.GetFallbackApplied().GetTo(), "fallback")
		s.emit(a.GetFallbackApplied())
	case messages.RetryAction_KIND_FALLBACK_SUCCEEDED:
		s.emit(a.GetFallbackSucceeded())
	case messages.RetryAction_KIND_STRIP_TRAILING_ERROR:
		if n := len(s.runtime); n > 0 {
			if m := s.runtime[n-1].GetAssistant(); m != nil && isFailure(m) {
				s.runtime[n-1] = nil
				s.runtime = s.runtime[:n-1]
			}
		}
	case messages.RetryAction_KIND_RESET_PROVIDER_SESSION:
		if p := s.deps.Providers[providerOf(s.model)]; p != nil {
			p.ResetSession(s.cfg.ID)
		}
	case messages.RetryAction_KIND_SCHEDULE_CONTINUE:
		s.tasksPending = true
		track.Request(ctx, s.deps.Clock, s.deps.Scheduler, &messages.ScheduleTask{
			SessionId: s.cfg.ID, Generation: a.GetGeneration(), DelayMs: a.GetDelayMs(), Task: "continue"})
	case messages.RetryAction_KIND_ROUTE_TO_COMPACTION:
		s.compact(ctx)
	case messages.RetryAction_KIND_ABORT_STREAM:
		if s.cancelTurn != nil {
			s.cancelTurn()
		}
	case messages.RetryAction_KIND_SWITCH_CREDENTIAL:
		reason := "usage_limit"
		if a.GetRedeemed() {
			reason = "usage_limit_redeemed"
		}
		s.emit(&messages.CredentialSwitch{Provider: providerOf(s.model), From: s.credential, To: a.GetCredential(), Reason: reason})
		s.credential = a.GetCredential()
	}
}

// taskDue runs a scheduled continue of the current generation; tasks of an
// older generation, or arriving after the chain was cancelled, are dropped.
func (s *SessionActor) taskDue(ctx actor.Context, m *messages.TaskDue) {
	if m.GetGeneration() != s.generation {
		return
	}
	s.tasksPending = m.GetRemaining() > 0
	if m.GetTask() != "continue" || !s.promptActive || !s.lifecycleOpen || s.turnActive || s.toolsActive {
		s.maybeSettle(ctx)
		return
	}
	s.maybeRevert()
	s.emit(&messages.AgentStart{Generation: s.generation})
	s.continuing = true
	s.startWithCredential(ctx)
}

// compact runs the compaction hook on context overflow; without one it
// emits compaction_required and ends the prompt with the overflow error.
func (s *SessionActor) compact(ctx actor.Context) {
	failed := s.last
	s.emit(&messages.CompactionRequired{ErrorMessage: failed.GetErrorMessage()})
	if s.deps.Compaction == nil || !s.cfg.State.AutoCompaction() {
		s.failureKind = KindContextOverflow
		s.failure = failed.GetErrorMessage()
		return
	}
	s.compacting = true
	runtime := append([]*messages.Entry(nil), s.runtime...)
	if n := len(runtime); n > 0 && isFailure(runtime[n-1].GetAssistant()) {
		runtime = runtime[:n-1] // the failed turn itself is passed as failed
	}
	s.runHook(ctx, runtime, failed, false)
}

// runHook runs the compaction hook in a goroutine of its own; its outcome
// comes back as CompactionFinished.
func (s *SessionActor) runHook(ctx actor.Context, runtime []*messages.Entry, failed *messages.AssistantMessage, manual bool) {
	hook, clk, root, self, gen, id := s.deps.Compaction, s.deps.Clock, ctx.ActorSystem().Root, ctx.Self(), s.generation, s.cfg.ID
	clk.Begin()
	go func() {
		defer clk.End()
		done := &messages.CompactionFinished{Generation: gen, Manual: manual}
		func() {
			defer func() {
				if r := recover(); r != nil {
					done.Error = fmt.Sprintf("compaction hook panicked: %v", r)
				}
			}()
			entries, err := hook(context.Background(), id, runtime, failed)
			if err != nil {
				done.Error = err.Error()
			}
			done.Context = entries
		}()
		track.Send(root, clk, self, done)
	}()
}

// manualCompact runs the compaction hook on the runtime context between
// prompts (the RPC's compact); failed is nil for the hook.
func (s *SessionActor) manualCompact(ctx actor.Context) {
	switch {
	case s.deps.Compaction == nil:
		ctx.Respond(&messages.CompactReply{Error: "no compaction hook is configured"})
		return
	case s.promptActive || s.compactWaiter != nil:
		ctx.Respond(&messages.CompactReply{Error: "a prompt or a compaction is running"})
		return
	}
	s.compactWaiter = ctx.Sender()
	s.runHook(ctx, append([]*messages.Entry(nil), s.runtime...), nil, true)
}

func (s *SessionActor) manualCompactionFinished(ctx actor.Context, m *messages.CompactionFinished) {
	waiter := s.compactWaiter
	s.compactWaiter = nil
	reply := &messages.CompactReply{Error: m.GetError(), EntriesBefore: int32(len(s.runtime))}
	for i := len(s.runtime) - 1; i >= 0; i-- {
		if a := s.runtime[i].GetAssistant(); a != nil {
			u := a.GetUsage()
			reply.TokensBefore = u.GetInput() + u.GetCacheRead() + u.GetCacheWrite()
			break
		}
	}
	if m.GetError() == "" {
		s.runtime = m.GetContext()
		reply.EntriesAfter = int32(len(s.runtime))
		if len(s.runtime) > 0 {
			reply.FirstKeptSeq = s.runtime[0].GetSeq()
		}
	}
	ctx.Send(waiter, reply)
}

func (s *SessionActor) compactionFinished(ctx actor.Context, m *messages.CompactionFinished) {
	if m.GetGeneration() != s.generation || !s.compacting {
		return
	}
	s.compacting = false
	if m.GetError() != "" || !s.promptActive || s.aborts.User {
		s.failureKind = KindContextOverflow
		s.failure = m.GetError()
		if s.failure == "" {
			s.failure = s.last.GetErrorMessage()
		}
		s.maybeSettle(ctx)
		return
	}
	s.runtime = m.GetContext()
	s.emit(&messages.AgentStart{Generation: s.generation})
	s.startTurn(ctx)
}

// maybeSettle answers the Prompt call once nothing of the prompt is left:
// no turn or tools running, no decision pending, the retry lifecycle
// closed, and no scheduled task for this generation.
func (s *SessionActor) maybeSettle(ctx actor.Context) {
	if !s.promptActive || s.startPending || s.turnActive || s.toolsActive || s.compacting ||
		s.deciding || s.lifecycleOpen || s.tasksPending {
		return
	}
	s.promptActive = false
	res := &messages.PromptResult{Generation: s.generation, Message: s.last}
	switch {
	case s.failureKind != "":
		res.ErrorKind, res.Error = s.failureKind, s.failure
		if res.Error == "" {
			res.Error = s.failureKind
		}
		if s.failureKind == KindAborted && s.failure == "" {
			res.Error = "prompt aborted"
		}
	case s.last == nil:
		res.ErrorKind, res.Error = KindFailed, "no assistant message"
	case isFailure(s.last):
		res.ErrorKind, res.Error = KindFailed, s.failure
		if res.Error == "" {
			res.Error = s.last.GetErrorMessage()
		}
	}
	s.emit(&messages.AgentSettled{Generation: s.generation, Success: res.GetError() == "", Error: res.GetError()})
	s.cfg.State.busy.Store(false)
	s.aborts.User, s.aborts.EditGuard = false, false
	ctx.Send(s.waiter, res)
	s.waiter = nil
}
