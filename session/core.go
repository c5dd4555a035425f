package session

import (
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// Config is a session's own configuration.
type Config struct {
	Model string // primary "provider/model"
	Role  string // model role for fallback chains ("default")
	// Settings are the session's retry settings (nil: the defaults). Read
	// only: the sessions of a runtime share them, and a core keeps the
	// pointer, not a copy.
	Settings *retry.Settings
	// Where a resumed session stood: the model in use ("" is Model), whether
	// it is a pinned fallback, and when it may revert to the primary.
	InUse        string
	Pinned       bool
	PrimaryUntil time.Time
	// Compaction says a compaction hook is installed; without one a context
	// overflow ends the prompt after compaction_required.
	Compaction bool
	// Credentialed names the providers whose credentials actor chooses
	// each turn's key; a turn on any other provider starts without asking,
	// and a usage limit there has no sibling key to switch to. Read only:
	// the sessions of a runtime share one.
	Credentialed map[string]bool
	// PassivateAfter is the shortest backoff the session waits out
	// without its actors (passivated): its timer then wakes it by id (0:
	// never).
	PassivateAfter time.Duration
	// FallbackRoles names the roles with a model-fallback actor (a
	// fallback chain); a session whose role has none never asks for a
	// fallback model. Read only, shared.
	FallbackRoles map[string]bool
	// Budgeted names the providers with a retry budget: with
	// retry.budget on, a retry on any other provider goes at its backoff
	// time without asking, and reports no outcomes. Read only, shared.
	Budgeted map[string]bool
	// Paced names the providers whose credentials actor paces turns (see
	// pacing.go): every turn there reserves its need when it asks for its
	// key, unless the key held is free and unpaced as the node's view
	// shows (KeyFree). Read only, shared.
	Paced map[string]bool
	// Limited names the providers whose credentials actor keeps an
	// overload limiter (see overload.go): every turn there asks for its
	// key and a place in its model's concurrency limit, even with its key
	// held and free. Read only, shared.
	Limited map[string]bool
	// QueueWait bounds how long a retry on a Limited provider waits, when
	// every model of its role is cooling down, for the earliest to come
	// back, instead of retrying into one that cools (see overload.go);
	// 0: it never waits. Beyond the reference policy.
	QueueWait time.Duration
	// Generation is the last prompt's generation: a core rebuilt after its
	// owner restarted goes on from it, so generations never repeat.
	Generation uint64
	// Recorded says the session's history store keeps its record, so that
	// it can be handed over (InHandOver) with its chain.
	Recorded bool
}

// Core is one session's lifecycle as a pure state machine, its retry
// chain included: one Step takes every input and returns every effect. Its
// state is its Record, defined once: what a core at rest persists is what
// it runs on. It is not safe for concurrent use: an actor owns it.
type Core struct {
	r    Record   // the session's state (Record's fields say what each is)
	step stepFunc // the step function of r.State (become sets both)

	// The session's configuration, given again when it is resumed.
	src              retry.Source
	settings         *retry.Settings // Config.Settings (Enabled is r.AutoRetry)
	credentialed     map[string]bool // Config.Credentialed
	budgeted         map[string]bool // Config.Budgeted
	pacedProviders   map[string]bool // Config.Paced
	limitedProviders map[string]bool // Config.Limited
	queueWait        time.Duration   // Config.QueueWait
	passivateAfter   time.Duration   // Config.PassivateAfter
	compaction       bool            // Config.Compaction
	recorded         bool            // Config.Recorded
	noFallbackChain  bool            // the role has no fallback actor (Config.FallbackRoles): fallback is never asked

	// Where the session stands with its actors: with them, or leaving
	// (passivated, handed over); and a hand-over asked for, done once the
	// session is at rest. An activation's, never in a record: a core
	// resumed from one is with its new actors.
	presence    Presence
	handingOver bool
	// queued says the turn selecting its key waits for a place in its
	// model's concurrency limit (not for its key's rate-limit budget). A
	// wait is never at rest, so never in a record.
	queued bool

	// What lives within a step, never at rest.
	now time.Time
	out *Effects // the step's, while it runs
}

// defaultSettings are the settings of a core configured with none.
var defaultSettings = retry.DefaultSettings()

// New returns an idle core drawing retry jitter from src.
func New(cfg Config, src retry.Source) *Core {
	c := Make(cfg, src)
	return &c
}

// Make is New as a value, for an owner that embeds its core (one
// allocation, and its fields next to the owner's).
func Make(cfg Config, src retry.Source) Core {
	if cfg.Settings == nil {
		cfg.Settings = &defaultSettings
	}
	c := Core{src: src, settings: cfg.Settings, compaction: cfg.Compaction, recorded: cfg.Recorded,
		credentialed: cfg.Credentialed, budgeted: cfg.Budgeted,
		pacedProviders: cfg.Paced, limitedProviders: cfg.Limited, queueWait: cfg.QueueWait,
		passivateAfter:  cfg.PassivateAfter,
		noFallbackChain: !cfg.FallbackRoles[cfg.Role]}
	c.r.Primary, c.r.Role, c.r.Model, c.r.Generation = cfg.Model, cfg.Role, cfg.Model, cfg.Generation
	c.r.Pinned, c.r.PrimaryUntil, c.r.AutoRetry = cfg.Pinned, cfg.PrimaryUntil, cfg.Settings.Enabled
	if cfg.InUse != "" {
		c.r.Model = cfg.InUse
	}
	c.become(Idle)
	return c
}

// State reports what the session is doing.
func (c *Core) State() State { return c.r.State }

// Busy reports whether a prompt runs.
func (c *Core) Busy() bool { return c.r.State != Idle && c.r.State != CompactingOnRequest }

// IsRetrying reports whether the retry lifecycle is open.
func (c *Core) IsRetrying() bool { return c.r.Chain.Attempt > 0 }

// Model is the "provider/model" in use.
func (c *Core) Model() string { return c.r.Model }

// Credential is the credential the last turn used.
func (c *Core) Credential() string { return c.r.Credential }

// AwaitsTurn reports whether the session waits for the end of turn (its
// stream), and AwaitsTools whether it waits for turn's tools: what they
// bring is written to the history only then.
func (c *Core) AwaitsTurn(turn uint64) bool { return turn == c.r.Turn && c.r.State == Streaming }

// AwaitsTools reports whether the session waits for the tools of turn.
func (c *Core) AwaitsTools(turn uint64) bool { return turn == c.r.Turn && c.r.State == RunningTools }

// Generation is the current prompt generation.
func (c *Core) Generation() uint64 { return c.r.Generation }

// AutoRetryEnabled reports retry.enabled.
func (c *Core) AutoRetryEnabled() bool { return c.r.AutoRetry }

// Step feeds in at now and adds the effects to carry out, in order, to
// out. The effects must be executed before the next Step. The inputs that
// mean the same in every state are taken here; every other goes to the
// state's step function, which ignores what its state does not wait for
// (a stale reply, a late timer).
func (c *Core) Step(out *Effects, now time.Time, in Input) {
	c.out, c.now = out, now
	defer func() { c.out = nil }()
	if c.presence != Present {
		c.stepAway(in)
		return
	}
	switch in.Kind {
	case InSetAutoRetry:
		c.r.AutoRetry = in.Enabled
	case InSetModel:
		c.setModel(in.Model)
	case InEditGuardAbort:
		c.editGuardAbort()
	case InStop:
		c.stop()
	case InHistoryFailed:
		c.historyFailed(in.Err, in.RevertModel)
	case InAttach:
		c.attach(in.Generation, in.OwnCaller && !in.Replaces)
	case InHandOver:
		c.askHandOver(in.Taken)
	case InTaken:
		c.leave()
	case InPassivate:
		c.passivate(in.Token)
	default:
		c.step(c, in)
	}
	if c.handingOver && c.r.State.atRest() && c.presence == Present {
		c.handOver()
	}
}

// editGuardAbort cancels the running turn for the streaming-edit guard.
func (c *Core) editGuardAbort() {
	if c.Busy() {
		c.r.Aborts.EditGuard = true
		c.r.FailureKind, c.r.Failure = KindAborted, "stream aborted by the streaming-edit guard"
		c.add(CancelTurn)
	}
}

// setModel makes the user's model the primary, unpinned, and switches to it.
func (c *Core) setModel(model string) {
	before := c.modelState()
	c.r.Primary = model
	c.r.Pinned = false
	c.switchModel(model, "user")
	c.r.Before = before
}

// credentialReply takes the credentials actor's answer to a usage limit:
// a switch to another key is the session's from now on, and the answer to
// the chain's ask goes on with its decision.
func (c *Core) credentialReply(in Input) {
	if in.Switched {
		sw := c.out.switches.add()
		*sw = CredentialSwitch{Model: c.r.Model, From: c.r.Credential, To: in.Credential, Reason: SwitchUsageLimit}
		if in.Redeemed {
			sw.Reason = SwitchRedeemed
		}
		c.emit(EventCredentialSwitch).Switch = sw
		c.r.Credential = in.Credential
	}
	if in.Token == c.r.Chain.Token {
		mark := len(c.out.list)
		c.credentialReplied(in.Switched, in.RetryAt)
		c.decided(mark, false)
	}
}

// prompt starts a prompt the owner has written to the history (historyErr: it could
// not, and the prompt ends at once with that error).
func (c *Core) prompt(historyErr string) {
	c.r.Generation++
	c.r.Aborts = retry.AbortState{}
	c.r.Last, c.r.Failure, c.r.FailureKind, c.r.RetryEnd = nil, "", "", nil
	if historyErr != "" {
		c.r.FailureKind, c.r.Failure = KindHistory, historyErr
		c.settle()
		return
	}
	c.maybeRevert()
	ev := c.emit(EventAgentStart)
	ev.Generation, ev.PromptStart = c.r.Generation, true
	c.selectCredential(false)
}

// selectCredential chooses the next turn's key: none on a provider
// without credentials, the key held when keep (a retry's continue whose
// key is free), else the credentials actor's choice. With a key chosen
// the turn starts in the same step. The turn retries the last one when
// that failed (a retry's continue): the credentials actor is told the key
// it failed on.
func (c *Core) selectCredential(keep bool) {
	c.become(SelectingCredential)
	switch {
	case !c.credentialed[provider(c.r.Model)]:
		c.credentialSelected("")
	case keep && !c.limited():
		c.credentialSelected(c.r.Credential)
	default:
		e := c.add(SelectCredential)
		e.Model = c.r.Model
		if isFailure(c.r.Last) {
			e.Credential = c.r.Credential
		}
		if c.gated() {
			e.Pace, e.Token = true, c.r.Turn+1
		}
		if c.limited() && c.settings.ModelFallback && !c.r.Pinned && c.r.Model == c.r.Primary {
			e.Fallbacks = c.settings.FallbackChains[c.r.Role]
		}
	}
}

// credentialSelected starts the turn on cred, unless the prompt was
// aborted, or the retry this turn was to make was cancelled, while the
// key was chosen (a reservation or place granted to it goes back).
func (c *Core) credentialSelected(cred string) {
	c.r.Credential = cred
	if c.r.Aborts.User || (isFailure(c.r.Last) && !c.IsRetrying()) {
		if c.r.Reservation != 0 {
			c.cancelReservation(c.r.Reservation)
			c.r.Reservation = 0
		}
		c.settle()
		return
	}
	c.startTurn()
}

// strayCredential takes a credentials actor's answer no turn waits for:
// an unpaced one is the key the session holds; a paced grant goes back.
func (c *Core) strayCredential(in Input) {
	switch {
	case in.Token == 0:
		c.r.Credential = in.Credential
	case in.Wait == 0:
		c.cancelReservation(in.Token)
	}
}

func (c *Core) startTurn() {
	c.r.Turn++
	c.become(Streaming)
	e := c.add(StartTurn)
	e.Turn, e.Model, e.Credential = c.r.Turn, c.r.Model, c.r.Credential
}

// turnEnded takes a turn's message, which the owner has written
// (historyErr: it could not), and the rate limits its response announced
// that the pacer has not had yet.
func (c *Core) turnEnded(msg *messages.AssistantMessage, limits *messages.RateLimits, historyErr string) {
	c.settleReservation(c.r.Model, msg, limits)
	c.r.Last = msg
	c.emit(EventMessageEnd).Message = msg
	c.endOnFailedWrite(historyErr)
	calls := toolCalls(msg)
	if len(calls) == 0 || isFailure(msg) || c.r.Aborts.User {
		c.decide(msg, nil)
		return
	}
	if !c.IsRetrying() {
		c.runTools(calls)
		return
	}
	// Spec 3, "What resets the counter": a tool-use message is a successful
	// assistant message, so it ends the open chain before its tools run.
	c.decide(msg, calls)
}

func (c *Core) runTools(calls []*messages.ToolCall) {
	c.become(RunningTools)
	e := c.add(RunTools)
	e.Turn, e.Calls = c.r.Turn, calls
}

// toolsDone takes the results of a turn's tools, which the owner has
// written to the history (historyErr: it could not); the next turn
// starts, on a paced provider once it has reserved (unless keyFree).
func (c *Core) toolsDone(historyErr string, keyFree bool) {
	c.endOnFailedWrite(historyErr)
	if c.r.Aborts.User {
		c.decide(c.r.Last, nil)
		return
	}
	c.add(DeliverSteering)
	if c.limited() || c.paced() && !keyFree {
		c.selectCredential(false)
		return
	}
	c.startTurn()
}

// armTimer arms the backoff timer for d, its continue scheduled behind it.
func (c *Core) armTimer(d time.Duration) {
	e := c.add(ArmTimer)
	e.Delay, e.Token, e.ContinueDelay, e.Generation = d, c.r.Chain.Token, continueDelay, c.r.Generation
	// A long wait is spent without actors, unless a budget may release
	// the retry early (its release goes to the actor).
	e.Passivate = c.passivateAfter > 0 && d >= c.passivateAfter && !c.budgetOn()
}

// BackoffToken is the token of the backoff timer while the session is in
// backoff (0 otherwise).
func (c *Core) BackoffToken() uint64 {
	if c.r.State != Backoff {
		return 0
	}
	return c.r.Chain.Token
}

// WaitingUntil is when the backoff timer fires, while the session is in
// backoff (the zero time otherwise).
func (c *Core) WaitingUntil() time.Time {
	if c.r.State != Backoff {
		return time.Time{}
	}
	return c.r.SleepUntil
}

// continueDue starts a retry's continue once its backoff is over (the
// timer's owner scheduled it behind the sleep); keyFree: the key the
// session holds is free, so the retry keeps it without asking.
func (c *Core) continueDue(keyFree bool) {
	model := c.r.Model
	c.maybeRevert()
	c.emit(EventAgentStart).Generation = c.r.Generation
	c.selectCredential(keyFree && c.r.Credential != "" && c.r.Model == model)
}

// abort is the user's global abort: it cancels the retry, then the stream.
func (c *Core) abort() {
	c.r.Aborts.User = true
	c.r.FailureKind = KindAborted
	c.abortAll()
	if c.pacingWait() {
		c.endPacingWait()
	}
}

// cancelRetry is abort_retry: it cancels the retry chain, and a turn's
// wait for its key's budget.
func (c *Core) cancelRetry() {
	mark := len(c.out.list)
	c.abortRetry()
	c.retryCancelled(mark)
	if c.pacingWait() {
		c.endPacingWait()
	}
}

// abortAll cancels the retry, then the stream.
func (c *Core) abortAll() {
	mark := len(c.out.list)
	c.abortRetry()
	c.add(CancelTurn)
	c.retryCancelled(mark)
}

// retryCancelled settles a session that waited on its retry chain, once
// the chain is cancelled: a decision that asked ends (agent_end, at mark:
// before what the cancel added), and so does a backoff.
func (c *Core) retryCancelled(mark int) {
	switch {
	case c.r.State.asking():
		c.agentEnd(mark)
		c.settle()
	case c.r.State == Backoff:
		c.settle()
	}
}

// compact runs the compaction hook on a context overflow; without one the
// prompt ends with the overflow error after compaction_required.
func (c *Core) compact() {
	c.emit(EventCompactionRequired).Error = c.r.Last.GetErrorMessage()
	if !c.compaction {
		c.r.FailureKind, c.r.Failure = KindContextOverflow, c.r.Last.GetErrorMessage()
		c.settle()
		return
	}
	c.become(Compacting)
	e := c.add(Compact)
	e.Generation, e.Message = c.r.Generation, c.r.Last
}

// compactionDone takes the compaction hook's answer: compaction_end, then
// the prompt goes on with the compacted context, or ends when the hook
// failed or the prompt was aborted while it ran.
func (c *Core) compactionDone(context []*messages.Entry, err string) {
	end := c.emit(EventCompactionEnd)
	end.Reason, end.Error, end.Aborted = "overflow", err, c.r.Aborts.User
	end.WillRetry = err == "" && !c.r.Aborts.User
	if !end.WillRetry {
		c.r.FailureKind, c.r.Failure = KindContextOverflow, err
		if c.r.Failure == "" {
			c.r.Failure = c.r.Last.GetErrorMessage()
		}
		c.settle()
		return
	}
	c.add(ReplaceContext).Context = context
	c.emit(EventAgentStart).Generation = c.r.Generation
	c.startTurn()
}

// stop ends the session: the stream is cancelled, an open retry chain ends
// with auto_retry_end{success:false}, and a running prompt settles with a
// shutdown error.
func (c *Core) stop() {
	c.r.Aborts.Dispose = true
	if c.handingOver {
		c.handingOver = false
		c.add(ReplyHandOver).Error = "the session stopped before it could be handed over"
	}
	if c.r.State == CompactingOnRequest {
		c.become(Idle)
		c.add(ReplyCompaction).Error = "the session shut down before the compaction ended"
	}
	c.add(CancelTurn)
	if c.IsRetrying() {
		c.emitEnd(retry.EndEvent{Attempt: c.lastStarted(), FinalError: ShutdownError})
		c.r.Chain = ChainRecord{}
	}
	c.add(ReleaseSession).Model = c.r.Model
	c.r.Reservation = 0 // released with the session
	if c.r.State != Idle {
		c.become(Idle)
		ev := c.emit(EventAgentSettled)
		ev.Generation, ev.Error = c.r.Generation, ShutdownError
		res := c.out.results.add()
		*res = Result{Generation: c.r.Generation, Message: c.r.Last, ErrorKind: KindShutdown, Error: ShutdownError}
		c.add(Settle).Result = res
	}
}

func (c *Core) modelState() ModelState {
	return ModelState{Model: c.r.Model, Primary: c.r.Primary, Pinned: c.r.Pinned, PrimaryUntil: c.r.PrimaryUntil}
}

// endOnFailedWrite ends the prompt when the owner could not write what the
// input brought (historyErr non-empty): an open retry chain ends, and the
// turn settles as under a user abort, nothing retried.
func (c *Core) endOnFailedWrite(historyErr string) {
	if historyErr == "" {
		return
	}
	if c.r.FailureKind != KindHistory {
		c.r.FailureKind, c.r.Failure = KindHistory, historyErr
	}
	c.r.Aborts.User = true
	c.abortAll()
}

// historyFailed ends the running prompt because its history could not be
// written: like a user abort (the stream is cancelled, an open retry chain
// ends, nothing is retried), but the prompt's error is err. A model change
// that could not be written is undone first.
func (c *Core) historyFailed(err string, revert bool) {
	if revert {
		b := c.r.Before
		c.r.Model, c.r.Primary, c.r.Pinned, c.r.PrimaryUntil = b.Model, b.Primary, b.Pinned, b.PrimaryUntil
	}
	if !c.Busy() {
		return
	}
	c.endOnFailedWrite(err)
	if c.r.State == SelectingCredential {
		c.settle()
	}
}

// settle answers the prompt once nothing of it is left.
func (c *Core) settle() {
	c.become(Idle)
	res := c.out.results.add()
	c.result(res)
	ev := c.emit(EventAgentSettled)
	ev.Generation, ev.Success, ev.Error = c.r.Generation, res.Error == "", res.Error
	c.r.Aborts.User, c.r.Aborts.EditGuard = false, false
	c.add(Settle).Result = res
}

// result sets res to how the prompt of the current generation ended (or
// stands: the record keeps its outcome until the next prompt).
func (c *Core) result(res *Result) {
	res.Generation, res.Message = c.r.Generation, c.r.Last
	switch {
	case c.r.FailureKind != "":
		res.ErrorKind, res.Error = c.r.FailureKind, c.r.Failure
		if res.Error == "" {
			res.Error = string(c.r.FailureKind)
		}
		if c.r.FailureKind == KindAborted && c.r.Failure == "" {
			res.Error = "prompt aborted"
		}
	case c.r.Last == nil:
		res.ErrorKind, res.Error = KindFailed, "no assistant message"
	case isFailure(c.r.Last):
		res.ErrorKind, res.Error = KindFailed, c.r.Failure
		if res.Error == "" {
			res.Error = c.r.Last.GetErrorMessage()
		}
	}
	if res.Error != "" {
		res.Retry = c.r.RetryEnd
	}
}

// switchModel changes the model in use and appends a model_change.
func (c *Core) switchModel(to, reason string) {
	if to == c.r.Model {
		return
	}
	c.r.Before = c.modelState()
	change := c.out.changes.add()
	*change = ModelChange{From: c.r.Model, To: to, Role: c.r.Role, Reason: reason, Pinned: c.r.Pinned, PrimaryUntil: c.r.PrimaryUntil}
	c.r.Model = to
	c.add(AppendModelChange).Change = change
	c.emit(EventModelChange).Change = change
}

// maybeRevert restores the primary model (cooldown-expiry policy) once its
// cooldown is over, unless the fallback is pinned. It runs before each new
// prompt and each scheduled continue.
func (c *Core) maybeRevert() {
	if c.r.Model == c.r.Primary || c.r.Pinned || c.settings.FallbackRevertPolicy != retry.RevertCooldownExpiry {
		return
	}
	if c.now.Before(c.r.PrimaryUntil) {
		return
	}
	c.switchModel(c.r.Primary, "revert")
}

// add adds an effect of kind k to the step's effects and returns it, to
// be filled in place (no copy of the whole effect).
func (c *Core) add(k EffectKind) *Effect {
	e := c.out.list.add()
	e.Kind = k
	return e
}

// emit adds the publication of an event of kind k to the step's effects
// and returns the event, to be filled in place.
func (c *Core) emit(k EventKind) *Event {
	return c.emitAt(len(c.out.list), k)
}

// emitAt is emit with the publication placed at index i of the step's
// effects, before those from i on.
func (c *Core) emitAt(i int, k EventKind) *Event {
	ev := c.out.events.add()
	ev.Kind = k
	e := c.out.list.insert(i)
	e.Kind, e.Event = Emit, ev
	return ev
}

// emitEnd emits auto_retry_end with end.
func (c *Core) emitEnd(end retry.EndEvent) {
	p := c.out.ends.add()
	*p = end
	c.emit(EventAutoRetryEnd).End = p
}

// emitFallback emits retry_fallback_applied or _succeeded (k) with f.
func (c *Core) emitFallback(k EventKind, f retry.FallbackEvent) {
	p := c.out.fallbacks.add()
	*p = f
	c.emit(k).Fallback = p
}

// provider is the provider part of a "provider/model" selector.
func provider(selector string) string {
	name, _, _ := retry.SplitModel(selector)
	return name
}

// modelName is the model part of a "provider/model" selector.
func modelName(selector string) string {
	_, name, _ := retry.SplitModel(selector)
	return name
}

func toolCalls(msg *messages.AssistantMessage) []*messages.ToolCall {
	var out []*messages.ToolCall
	for _, b := range msg.GetContent() {
		if call := b.GetToolCall(); call != nil {
			out = append(out, call)
		}
	}
	return out
}

func isFailure(m *messages.AssistantMessage) bool {
	r := m.GetStopReason()
	return r == messages.StopReason_STOP_REASON_ERROR || r == messages.StopReason_STOP_REASON_ABORTED
}
