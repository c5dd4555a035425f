package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/internal/plaintext"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/pacing"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/session"
	"github.com/musepi/musepi/timers"
)

// ShutdownError is the final error of a retry chain or prompt cut short by
// the session stopping.
const ShutdownError = session.ShutdownError

// panickedError begins the error of a prompt whose session actor panicked.
const panickedError = "the session panicked (a bug, logged with its stack); prompt ended, the session restarts from its history"

// SessionActor owns one conversation: the context (what is sent to
// the model), the persisted history (what is kept) and the event stream.
// Every decision is its session.Core's: the actor feeds the core its inputs
// and carries out the effects the core returns (turns and tools in their
// own goroutines, backoffs through the runtime's timer service,
// asks to the credentials, fallback and budget actors).
type SessionActor struct {
	// asleep is the session's state that outlives the actor when the
	// session waits without it (passivated); the fields below are rebuilt
	// by each actor or empty at rest.
	asleep

	deps  *Deps
	entry *PreparedSession // under its name in deps, while it lives
	cfg   *SessionConfig

	pending []session.Input // inputs an effect answered at once, during a step

	panicked string // what the actor panicked with (reportPanic), for its prompt's error
}

// effectBuffers lend the sessions a buffer for one step's effects, so an
// idle session keeps none.
var effectBuffers = sync.Pool{New: func() any { return new(session.Effects) }}

// pendingBuffers lend the sessions a buffer for the inputs one step's
// effects answered at once.
var pendingBuffers = sync.Pool{New: func() any { return new([]session.Input) }}

// PrepareSession prepares the session on its open history (cfg.History,
// with the entries cfg.Restored it held when opened) under name, for
// StartSession to spawn. A prompt the history shows in progress (the
// process stopped in the middle of it) is closed first with an
// "interrupted" marker; the error is the failure to write that.
//
// Every session of a runtime is spawned from the same props: the actor
// finds its configuration under its name when it starts (again after a
// panic), so a session costs no props or producer of its own.
func PrepareSession(deps *Deps, cfg SessionConfig) (*PreparedSession, error) {
	entries := cfg.Restored
	cfg.Restored = nil
	cfg.Model = interned(cfg.Model)
	cfg.State.priority.Store(uint32(cfg.Priority))
	r := resume(entries, cfg.Model, deps.knownModel)
	records, _ := cfg.History.(history.RecordLog)
	clearRecord := false
	if records != nil {
		rec, clear, err := recordToResume(deps, cfg.ID, records, entries)
		if err != nil {
			return nil, err
		}
		if rec != nil {
			r.record = rec
			cfg.State.Init(rec.Model, rec.AutoRetry)
			if c, err := session.Resume(session.Config{}, nil, *rec); err == nil {
				cfg.State.publish(c) // what the actor will stand at, for callers from now on
			}
			deps.Log.Info("resuming the session's retry chain from its record", slog.String("session", cfg.ID), slog.Int("attempt", rec.Chain.Attempt), slog.Time("due", rec.SleepUntil))
			return &PreparedSession{cfg: &cfg, resumed: &r}, nil
		}
		clearRecord = clear
	}
	r, err := markInterrupted(deps, &cfg, entries, r, records, clearRecord)
	if err != nil {
		return nil, err
	}
	cfg.State.Init(r.model, cfg.Settings.Enabled)
	return &PreparedSession{cfg: &cfg, resumed: &r}, nil
}

// markInterrupted closes the prompt entries show in progress, if any, with
// an "interrupted" marker, written and synced (with clearRecord, in the
// commit that clears the record not resumed: its due time must wake
// nobody), and returns what the session resumes from after it.
func markInterrupted(deps *Deps, cfg *SessionConfig, entries []*messages.Entry, r resumed, records history.RecordLog, clearRecord bool) (resumed, error) {
	extra := interruption(entries, r.model, deps.Clock.Now().UnixMilli())
	for i, e := range extra {
		e.Seq = r.seq + uint64(i) + 1
	}
	var err error
	switch {
	case clearRecord:
		err = records.CommitRecord(history.Record{}, extra...)
	case len(extra) > 0:
		err = cfg.History.Append(extra...)
	}
	if err != nil || len(extra) == 0 {
		return r, err
	}
	if err := cfg.History.Sync(); err != nil {
		return r, err
	}
	deps.Log.Warn("resumed a session whose last prompt was interrupted; marked it", slog.String("session", cfg.ID), slog.Uint64("seq", r.seq+1))
	return resume(append(entries, extra...), cfg.Model, deps.knownModel), nil
}

// PreparedSession is a session ready to start, and what its actor finds
// under its name while it lives: its configuration, and the state rebuilt
// from its history for its first start (nil once taken: after a panic it
// reloads).
type PreparedSession struct {
	cfg     *SessionConfig
	resumed *resumed
	// passivated is the state of a session that left its actors while it
	// waited (nil otherwise); the next actor takes it up.
	passivated *asleep
}

// asleep is what a session keeps while it waits out a backoff without its
// actors: what its next actor goes on from. The rest of an actor is
// rebuilt as at any start (its configuration, from its PreparedSession)
// or is empty at rest, with no turn, tools, compaction or step running
// (TestAsleepKeepsTheActor).
type asleep struct {
	core    session.Core
	hist    historyWriter
	events  eventPublisher
	callers callers // who waits for its answers
	work    turnRunner
}

// StartSession spawns the prepared session p under name; a runtime starts
// a session's actor with the first message it is sent (as virtual actors
// are activated), so a session that is never used costs no actor.
func StartSession(root *actor.RootContext, deps *Deps, name string, p *PreparedSession) (*actor.PID, error) {
	deps.sessions.store(name, p)
	pid, err := root.SpawnNamed(deps.shared().session, name)
	if err != nil {
		deps.sessions.remove(name, p)
	}
	return pid, err
}

// Resumes reports whether the session resumes a retry chain from its
// record when it starts: its actor should start at once, to arm the
// chain's timer.
func (p *PreparedSession) Resumes() bool { return p.resumed != nil && p.resumed.record != nil }

// Drop closes the history of a prepared session that never started.
func (p *PreparedSession) Drop() error { return p.cfg.History.Close() }

// Passivated reports whether the session left its actors while it waits
// (its next actor takes up its state, and a prompt is waiting).
func (p *PreparedSession) Passivated() bool { return p.passivated != nil }

// Receive turns the session's messages into inputs of its core.
func (s *SessionActor) Receive(ctx actor.Context) {
	defer s.reportPanic()
	if s.stepInput(ctx) {
		return
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.started(ctx)
	case *protocol.PromptRequest:
		s.prompt(ctx, m)
	case *protocol.AttachPrompt:
		s.step(ctx, session.Input{Kind: session.InAttach, Generation: m.GetGeneration(), OwnCaller: s.callers.prompt != nil && !s.callers.attached,
			Replaces: s.callers.prompt.GetAddress() == m.GetReplacesAddress() && s.callers.prompt.GetId() == m.GetReplacesId()})
	case *protocol.HandOver:
		s.step(ctx, session.Input{Kind: session.InHandOver, Taken: errors.Is(s.work.hold(), history.ErrTaken)})
	case *turnFinished:
		s.turnFinished(ctx, m)
	case *toolsFinished:
		s.toolsFinished(ctx, m)
	case *timers.Due:
		s.step(ctx, session.Input{Kind: session.InBackoffDone, Token: m.Ticket, Generation: m.Generation, KeyFree: sharedActors{s.deps, s.cfg}.keyFree(s.core.Credential(), s.core.Model())})
	case *passivate:
		s.step(ctx, session.Input{Kind: session.InPassivate, Token: m.ticket})
	case *compactionFinished:
		s.step(ctx, session.Input{Kind: session.InCompactionDone, Generation: m.generation, Context: m.context, Err: m.err})
	case *protocol.CompactRequest:
		s.step(ctx, session.Input{Kind: session.InCompact})
	case *protocol.SetModelRequest:
		ctx.Respond(s.setModel(ctx, m.GetModel()))
	case *protocol.MessagesRequest:
		ctx.Respond(s.hist.messages(m.GetHistory()))
	case *protocol.SessionOptions:
		s.setOptions(ctx, m)
	case *actor.Stopping:
		s.stopping(ctx)
	case *actor.Restarting:
		s.restarting(ctx)
	case *actor.Stopped:
		s.exited(ctx)
	}
}

// stepInput steps the core with the message's input, when the message is
// one (inputOf), and reports whether it was.
func (s *SessionActor) stepInput(ctx actor.Context) bool {
	in, ack, ok := inputOf(ctx.Message())
	if !ok {
		return false
	}
	if sel, isSel := ctx.Message().(*protocol.CredentialSelected); isSel {
		s.work.oversize = sel.GetTooLarge()
	}
	s.step(ctx, in)
	if ack {
		ctx.Respond(&protocol.Ack{})
	}
	return true
}

// inputOf is the core's input for a message that is one as it is: a reply
// of a shared actor, a turn's delta, a control (answered with an Ack once
// stepped: ack).
func inputOf(msg any) (in session.Input, ack, ok bool) {
	switch m := msg.(type) {
	case *ResumeChain:
		// A session resumed from its record arms its backoff timer again for
		// what is left of it (at once when it is past due).
		return session.Input{Kind: session.InTimerLost}, false, true
	case *protocol.CredentialSelected:
		return session.Input{Kind: session.InCredentialSelected, Credential: m.GetCredential(), Token: m.GetToken(),
			Switched: m.GetSwitched(), Wait: time.Duration(m.GetWaitMs()) * time.Millisecond, Limit: m.GetLimit(),
			Queued: int(m.GetQueued()), Model: m.GetModel()}, false, true
	case *protocol.PacingGrant:
		return session.Input{Kind: session.InCredentialSelected, Credential: m.GetCredential(), Token: m.GetToken(),
			Switched: m.GetSwitched()}, false, true
	case *turnDelta:
		return session.Input{Kind: session.InTurnDelta, Turn: m.turn, DeltaKind: m.kind, Delta: m.text}, false, true
	case *turnLimits:
		return session.Input{Kind: session.InRateLimits, Turn: m.turn, Limits: m.limits, At: m.arrived}, false, true
	case *protocol.UsageLimitReply:
		in := session.Input{Kind: session.InCredentialReply, Token: m.GetToken(), Switched: m.GetSwitched(),
			Redeemed: m.GetRedeemed(), Credential: m.GetCredential()}
		if m.GetRetryAtMs() > 0 {
			in.RetryAt = time.UnixMilli(m.GetRetryAtMs())
		}
		return in, false, true
	case *protocol.NextModelReply:
		in := session.Input{Kind: session.InFallbackReply, Token: m.GetToken(), Switched: m.GetSwitched(),
			From: m.GetFrom(), To: m.GetTo(), Role: m.GetRole()}
		if ms := m.GetPrimaryCooldownUntilMs(); ms > 0 {
			in.CooldownUntil = time.UnixMilli(ms)
		}
		if ms := m.GetNextBackMs(); ms > 0 {
			in.Back = time.UnixMilli(ms)
		}
		return in, false, true
	case *protocol.RetryBudgetGrant:
		return session.Input{Kind: session.InBudgetGrant, Token: m.GetToken(), At: time.Unix(0, m.GetAtUnixNano())}, false, true
	case *protocol.RetryBudgetRelease:
		return session.Input{Kind: session.InBudgetRelease, Token: m.GetToken(), At: time.Unix(0, m.GetAtUnixNano())}, false, true
	case *protocol.AbortRequest:
		if m.GetEditGuard() {
			return session.Input{Kind: session.InEditGuardAbort}, true, true
		}
		return session.Input{Kind: session.InAbort}, true, true
	case *protocol.AbortRetryRequest:
		return session.Input{Kind: session.InAbortRetry}, true, true
	case *protocol.SetAutoRetryRequest:
		return session.Input{Kind: session.InSetAutoRetry, Enabled: m.GetEnabled()}, true, true
	}
	return session.Input{}, false, false
}

// turnFinished records the turn's message, stamped with the session's
// provider and model names, and steps the core with it; a turn the session
// gave up on (aborted, shut down) is dropped, and one whose guard found the
// session taken by another node makes the actor leave.
func (s *SessionActor) turnFinished(ctx actor.Context, m *turnFinished) {
	if !s.core.AwaitsTurn(m.turn) {
		return
	}
	if m.taken { // its guard found the session another's: nothing was sent
		s.step(ctx, session.Input{Kind: session.InTaken})
		return
	}
	s.work.running = nil // over: a session waiting in backoff keeps no turn
	s.work.firstToken = m.firstToken
	msg := m.msg
	if msg.GetTimestampMs() == 0 {
		msg.TimestampMs = s.deps.Clock.Now().UnixMilli()
	}
	// The provider is the configured name the model selector uses
	// ("fake"), not the adapter's wire kind ("openai").
	provName, modelName, _ := retry.SplitModel(s.work.turnModel)
	msg.Provider = provName
	if msg.GetModel() == "" {
		msg.Model = modelName
	}
	limits := msg.GetRateLimits()
	msg.RateLimits = nil // no part of the conversation
	err := s.hist.write(true, assistantEntry(msg)...)
	s.step(ctx, session.Input{Kind: session.InTurnEnded, Turn: m.turn, Message: msg, Limits: limits, Err: err})
}

// toolsFinished records the tool results, tells the subscribers, and steps
// the core.
func (s *SessionActor) toolsFinished(ctx actor.Context, m *toolsFinished) {
	if !s.core.AwaitsTools(m.turn) {
		return
	}
	if m.taken { // its hold found the session another's: nothing ran
		s.step(ctx, session.Input{Kind: session.InTaken})
		return
	}
	s.work.running = nil
	now := s.deps.Clock.Now().UnixMilli()
	entries := make([]*messages.Entry, len(m.results))
	for i, r := range m.results {
		r.TimestampMs = now
		entries[i] = &messages.Entry{Entry: &messages.Entry_ToolResult{ToolResult: r}}
	}
	err := s.hist.write(true, entries...)
	for _, r := range m.results {
		s.events.emitWire(func(ev *messages.SessionEvent) {
			ev.Event = &messages.SessionEvent_ToolExecutionEnd{ToolExecutionEnd: &messages.ToolExecutionEnd{Result: r}}
		})
	}
	s.step(ctx, session.Input{Kind: session.InToolsDone, Turn: m.turn, Err: err, KeyFree: sharedActors{s.deps, s.cfg}.keyFree(s.core.Credential(), s.core.Model())})
}

// setModel switches the session's model, once checked and written to the history.
func (s *SessionActor) setModel(ctx actor.Context, model string) *protocol.Ack {
	ack := s.deps.checkModel(model)
	if ack.GetError() == "" {
		if err := s.step(ctx, session.Input{Kind: session.InSetModel, Model: model}); err != nil {
			ack.Error = err.Error() // not written: the model stays as it was
		}
	}
	return ack
}

// reportPanic reports a panic of the actor, a bug (in the caller's jitter
// source, which the core's retry decision runs, or in ours): it is logged
// with the session and its stack and raised again, to the actor's
// supervisor, which restarts the actor (restarting). Nothing is rolled
// back: the core's state after a panic is not trusted.
func (s *SessionActor) reportPanic() {
	r := recover()
	if r == nil {
		return
	}
	s.panicked = fmt.Sprint(r)
	id := ""
	if s.cfg != nil {
		id = s.cfg.ID
	}
	s.deps.Log.Error("session actor panicked; its prompt ends and the actor restarts from its history",
		slog.String("session", id), slog.String("panic", s.panicked), slog.String("stack", string(debug.Stack())))
	panic(r)
}

// restarting: the actor panicked (reportPanic) and its supervisor restarts
// it. The prompt running ends with the panic as its error (never a hang),
// its turn or tools are cancelled and its backoff timer stopped; the next
// instance starts idle from the history, as after any restart.
func (s *SessionActor) restarting(ctx actor.Context) {
	s.work.cancel()
	if s.callers.prompt != nil {
		ctx.Send(s.callers.prompt, &protocol.PromptResult{Generation: s.core.Generation(), ErrorKind: string(session.KindFailed),
			Error: fmt.Sprintf("%s: %s", panickedError, s.panicked)})
		s.callers.prompt = nil
	}
	if s.cfg != nil {
		s.deps.Timers.Cancel(s.cfg.ID, 0)
	}
}

// stopping ends the session's actor: the core stops (a prompt running
// ends with ErrShutdown), unless the session passivated or left for
// another activation, which its host may just have found.
func (s *SessionActor) stopping(ctx actor.Context) {
	if s.core.Presence() == session.Present && s.work.taken() {
		s.step(ctx, session.Input{Kind: session.InTaken})
	}
	s.step(ctx, session.Input{Kind: session.InStop})
	if s.core.Presence() != session.Passivated { // a passivated session's timer wakes it by id
		s.deps.Timers.Cancel(s.cfg.ID, 0)
	}
}

// exited: the actor has stopped; the history closes unless the session
// passivated (its next actor takes the history up).
func (s *SessionActor) exited(ctx actor.Context) {
	s.deps.sessions.remove(ctx.Self().Id, s.entry)
	if s.core.Presence() == session.Passivated {
		return
	}
	if err := s.cfg.History.Close(); err != nil {
		s.deps.Log.Error("close history", slog.Any("error", err), slog.String("session", s.cfg.ID))
	}
}

// prompt records a new prompt in the history (a session that is idle),
// tells a sender that asked for it that the prompt is written, and hands
// it to the core; a prompt that cannot be written ends at once with the
// error.
func (s *SessionActor) prompt(ctx actor.Context, m *protocol.PromptRequest) {
	if s.core.State() != session.Idle {
		s.step(ctx, session.Input{Kind: session.InPrompt}) // rejected
		return
	}
	s.callers.prompt, s.callers.attached, s.hist.promptErr = ctx.Sender(), false, nil
	user, entry := userEntry(m.GetText(), s.deps.Clock.Now().UnixMilli())
	s.events.promptUser = user
	err := s.hist.write(true, entry...)
	if err == "" && m.GetAck() {
		ctx.Send(ctx.Sender(), &protocol.PromptAccepted{Generation: s.core.Generation() + 1})
	}
	s.step(ctx, session.Input{Kind: session.InPrompt, Err: err})
}

// assistantEntry is msg as a batch of one entry for writeHistory, in one
// allocation: the entry, its oneof wrapper and the batch's array (what
// would be three, the last because the history's Append keeps it from
// the stack). It is the size class the entry and its wrapper take anyway.
func assistantEntry(msg *messages.AssistantMessage) []*messages.Entry {
	e := new(struct {
		entry   messages.Entry
		wrapper messages.Entry_Assistant
		batch   [1]*messages.Entry
	})
	e.wrapper.Assistant = msg
	e.entry.Entry = &e.wrapper
	e.batch[0] = &e.entry
	return e.batch[:]
}

// userEntry is a prompt's user message (text, at ms Unix milliseconds)
// and the message as a batch of one entry for writeHistory, in one allocation:
// what would be four, as for assistantEntry.
func userEntry(text string, ms int64) (*messages.UserMessage, []*messages.Entry) {
	e := new(struct {
		user    messages.UserMessage
		entry   messages.Entry
		wrapper messages.Entry_User
		batch   [1]*messages.Entry
	})
	e.user.Text, e.user.TimestampMs = text, ms
	e.wrapper.User = &e.user
	e.entry.Entry = &e.wrapper
	e.batch[0] = &e.entry
	return &e.user, e.batch[:]
}

// step feeds in to the core and carries out the effects, then the inputs
// those effects answered at once.
//
// It returns the history write that failed in the course of it, if any.
func (s *SessionActor) step(ctx actor.Context, in session.Input) (historyErr error) {
	s.events.listening = s.events.listened() // once per step: each event would read both fan-outs
	buf := effectBuffers.Get().(*session.Effects)
	pend := pendingBuffers.Get().(*[]session.Input)
	s.pending = (*pend)[:0]
	for next := 0; ; next++ {
		s.deps.steps.Add(1)
		s.core.Step(buf, s.deps.Clock.Now(), in)
		effects := buf.List()
		for i := range effects {
			s.execute(ctx, &effects[i])
		}
		s.hist.commitStep(&s.core)
		buf.Reset()                                          // drop what the effects point to
		if failed, err := s.hist.stepFailure(); err != nil { // before what the effects answered
			s.pending = slices.Insert(s.pending, next, failed)
			if historyErr == nil {
				historyErr = err
			}
		}
		if next == len(s.pending) {
			break
		}
		in = s.pending[next]
	}
	effectBuffers.Put(buf)
	clear(s.pending)
	*pend = s.pending[:0]
	pendingBuffers.Put(pend)
	s.pending = nil
	s.publishState()
	return historyErr
}

// setOptions applies the options a caller set (the thinking level of the
// next turns, compaction on overflow) and publishes them; a caller that
// asked gets an Ack once they are.
func (s *SessionActor) setOptions(ctx actor.Context, m *protocol.SessionOptions) {
	if m.ThinkingLevel != nil {
		s.cfg.State.setThinkingLevel(provider.ThinkingLevel(m.GetThinkingLevel()))
	}
	if m.AutoCompaction != nil {
		s.cfg.State.noAutoComp.Store(!m.GetAutoCompaction())
	}
	if m.Priority != nil {
		s.cfg.Priority = pacing.PriorityOf(m.GetPriority())
		s.cfg.State.priority.Store(uint32(s.cfg.Priority))
	}
	if ctx.Sender() != nil {
		ctx.Respond(&protocol.Ack{})
	}
}

// publishState mirrors what callers read without asking the actor.
func (s *SessionActor) publishState() {
	s.cfg.State.publish(&s.core)
}

// publish mirrors the core's state.
func (st *SessionState) publish(c *session.Core) {
	st.busy.Store(c.Busy())
	st.compacting.Store(c.State() == session.Compacting || c.State() == session.CompactingOnRequest)
	st.state.Store(uint32(c.State()))
	var retryAt int64
	if t := c.WaitingUntil(); !t.IsZero() {
		retryAt = t.UnixNano()
	}
	st.retryAt.Store(retryAt)
	st.retrying.Store(c.IsRetrying())
	st.generation.Store(c.Generation())
	st.autoRetry.Store(c.AutoRetryEnabled())
}

func (s *SessionActor) started(ctx actor.Context) {
	entry := s.deps.sessions.load(ctx.Self().Id)
	s.entry = entry
	s.cfg = s.entry.cfg
	if a := entry.passivated; a != nil { // the session comes back from waiting
		entry.passivated = nil
		s.asleep = *a
		s.step(ctx, session.Input{Kind: session.InWake})
		return
	}
	r, restarted := s.entry.takeResumed(s.deps)
	s.hist = historyWriter{cfg: s.cfg, deps: s.deps, context: r.context, seq: r.seq}
	s.events = eventPublisher{cfg: s.cfg, deps: s.deps}
	s.events.subscribed.watch(s.cfg.Events, s.cfg.AllEvents)
	s.work = turnRunner{cfg: s.cfg, deps: s.deps}
	s.work.holder, _ = s.cfg.History.(history.Holder)
	if records, ok := s.cfg.History.(history.RecordLog); ok {
		// After a restart the chain is gone, but its record may be left:
		// the session's next step at rest clears it.
		s.hist.dur = &durable{records: records, recordKept: restarted}
	}
	cfg := s.deps.coreConfig(s.cfg, r, s.hist.dur != nil)
	if restarted { // after a panic: its generations go on
		cfg.Generation = s.cfg.State.Generation()
	}
	if rec := r.record; rec != nil && s.hist.dur != nil {
		core, err := session.Resume(cfg, s.deps.newSource(), *rec)
		if err == nil {
			s.core, s.hist.dur.recordKept = *core, true
			s.cfg.State.Init(rec.Model, rec.AutoRetry)
			s.publishState() // the record's timer is owed: its runtime sends ResumeChain
			return
		}
		s.deps.Log.Error("resume from the session record; starting idle", slog.Any("error", err), slog.String("session", s.cfg.ID))
	}
	s.core = session.Make(cfg, s.deps.newSource())
	s.cfg.State.Init(r.model, s.cfg.Settings.Enabled)
}

func isFailure(m *messages.AssistantMessage) bool {
	r := m.GetStopReason()
	return r == messages.StopReason_STOP_REASON_ERROR || r == messages.StopReason_STOP_REASON_ABORTED
}

// takeResumed is what the session starts from: what PrepareSession found,
// taken once, or, restarted after a panic, the history on disk, reloaded:
// that is the truth.
func (p *PreparedSession) takeResumed(deps *Deps) (r *resumed, restarted bool) {
	r = p.resumed
	p.resumed = nil
	if r != nil {
		return r, false
	}
	entries, err := p.cfg.History.Load()
	if err != nil {
		deps.Log.Error("reload history after a restart", slog.Any("error", err), slog.String("session", p.cfg.ID))
	}
	rr := resume(entries, p.cfg.Model, deps.knownModel)
	return &rr, true
}

// coreConfig is the configuration of the core of the session sc, resuming
// r; recorded: its history keeps its record.
func (d *Deps) coreConfig(sc *SessionConfig, r *resumed, recorded bool) session.Config {
	cfg := session.Config{Model: r.primary, Role: sc.Role, Settings: sc.Settings,
		Compaction: d.Compaction != nil, InUse: r.model, Pinned: r.pinned,
		Credentialed: d.shared().credentialed, Budgeted: d.shared().budgeted,
		FallbackRoles: d.shared().fallbackRoles, PassivateAfter: d.Passivation.After, Recorded: recorded,
		Paced: d.shared().paced, Limited: d.shared().limited, QueueWait: d.QueueWait}
	if r.primaryCooldownUntilMs > 0 {
		cfg.PrimaryUntil = time.UnixMilli(r.primaryCooldownUntilMs)
	}
	return cfg
}

// newSource is the jitter source of the session's retry chain.
func (d *Deps) newSource() retry.Source {
	if d.NewSource != nil {
		return d.NewSource()
	}
	seed := rand.Uint64()
	return retry.NewPCGSource(seed, seed>>1)
}

// checkModel validates a model the user picks.
func (d *Deps) checkModel(model string) *protocol.Ack {
	if err := plaintext.Check("model", model); err != nil {
		return &protocol.Ack{Error: err.Error()}
	}
	prov, _, ok := retry.SplitModel(model)
	if !ok {
		return &protocol.Ack{Error: fmt.Sprintf("model %q: want \"provider/model\"", model)}
	}
	if _, ok := d.Providers[prov]; !ok {
		return &protocol.Ack{Error: fmt.Sprintf("model %q: unknown provider %q", model, prov)}
	}
	return &protocol.Ack{}
}
