package musepi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/internal/hosting"
	"github.com/musepi/musepi/internal/reply"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/session"
)

// Session is one conversation running as an actor. Its methods are safe for
// concurrent use.
type Session struct {
	id     string
	rt     *Runtime
	state  *actors.SessionState
	events actors.Fanout // the session's subscribers
	// at is where the session runs: its actor in this runtime (&local),
	// or, for a handle of a cluster runtime, its activation on whichever
	// node hosts it (package cluster's runner).
	at    hosting.Runner
	local localActor
}

// Errors a Prompt may return, wrapped in a *PromptError; test with errors.Is.
var (
	ErrPromptFailed    = errors.New("musepi: prompt failed")
	ErrBusy            = errors.New("musepi: a prompt is already running")
	ErrAborted         = errors.New("musepi: prompt aborted")
	ErrContextOverflow = errors.New("musepi: context overflow")
	ErrRetryCancelled  = errors.New("musepi: retry cancelled")
	ErrShutdown        = errors.New("musepi: session shut down")
	// ErrSessionClosed: the session was closed (Session.Close) before the
	// call; after Runtime.Shutdown calls fail with ErrRuntimeClosed.
	ErrSessionClosed = errors.New("musepi: session is closed")
	// ErrHistory: the prompt's history could not be written (a full disk,
	// an I/O error); the *PromptError also matches a *history.Error
	// (errors.As) naming the file.
	ErrHistory = errors.New("musepi: history write failed")
	// ErrNoPrompt: Attach found no prompt to attach to.
	ErrNoPrompt = errors.New("musepi: no prompt to attach to")
	// ErrHandedOver: the session was handed over (HandOver) while the
	// prompt waited out a backoff; it goes on where the session is opened
	// next, and Attach there returns its result.
	ErrHandedOver = errors.New("musepi: session handed over")
)

// kindErrors are the API errors of the error kinds (session.ErrorKind)
// a prompt ends with.
var kindErrors = map[session.ErrorKind]error{
	session.KindFailed:          ErrPromptFailed,
	session.KindBusy:            ErrBusy,
	session.KindAborted:         ErrAborted,
	session.KindContextOverflow: ErrContextOverflow,
	session.KindRetryCancelled:  ErrRetryCancelled,
	session.KindShutdown:        ErrShutdown,
	session.KindHistory:         ErrHistory,
	session.KindNoPrompt:        ErrNoPrompt,
	session.KindHandedOver:      ErrHandedOver,
}

// PromptError says why a prompt did not succeed. Message is the last
// assistant message (may be nil).
type PromptError struct {
	Kind    error  // one of the Err* sentinels
	Detail  string // the final error text (e.g. auto_retry_end.finalError)
	Message *AssistantMessage
	// History is the failed write of an ErrHistory error (nil otherwise).
	History *history.Error
	// Retry is how the prompt's retry chain ended without success (retries
	// exhausted, a wait over retry.maxDelayMs, cancelled; nil when no
	// chain failed).
	Retry *RetryError
	// closed is why an ErrShutdown prompt's session went away:
	// ErrRuntimeClosed or ErrSessionClosed.
	closed error
}

// RetryError says how a prompt's retry chain ended without success; a
// *PromptError wraps it (errors.As).
type RetryError struct {
	Class      string // of the failure retried: "transient", "usage_limit", ...
	Attempt    int    // the last attempt, as auto_retry_end reported it
	Status     int    // HTTP status of the last failed turn (0: none)
	FinalError string // auto_retry_end.finalError
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("retry chain (%s) ended after attempt %d: %s", e.Class, e.Attempt, e.FinalError)
}

func (e *PromptError) Error() string { return fmt.Sprintf("%v: %s", e.Kind, e.Detail) }

// Unwrap returns the sentinel, History and Retry when set, and for
// ErrShutdown whether the runtime (ErrRuntimeClosed) or only the session
// (ErrSessionClosed) was closed.
func (e *PromptError) Unwrap() []error {
	errs := []error{e.Kind}
	if e.closed != nil {
		errs = append(errs, e.closed)
	}
	if e.History != nil {
		errs = append(errs, e.History)
	}
	if e.Retry != nil {
		errs = append(errs, e.Retry)
	}
	return errs
}

// ID is the session id.
func (s *Session) ID() string { return s.id }

// Prompt sends text and returns the final assistant message once the prompt
// has settled: every retry chain it started has ended and no post-prompt
// task is left. When ctx ends first, the prompt is aborted and ctx.Err() is
// returned.
func (s *Session) Prompt(ctx context.Context, text string) (*AssistantMessage, error) {
	type outcome struct {
		msg *AssistantMessage
		err error
	}
	done := make(chan outcome, 1)
	s.PromptAsync(ctx, text, func(msg *AssistantMessage, err error) { done <- outcome{msg, err} })
	out := <-done
	return out.msg, out.err
}

// PromptAsync is Prompt without a waiting goroutine: it sends text and
// returns at once; done is called exactly once, from a runtime goroutine,
// with what Prompt would have returned. done must not block. A session
// waiting this way costs no goroutine, which is how one process holds
// hundreds of thousands of prompts riding out an outage.
//
// Cancellation has one outcome: when ctx ends before the prompt's result
// has come back, done gets ctx.Err() (context.Canceled or
// context.DeadlineExceeded) and the prompt is aborted, never the abort's own
// result (ErrAborted, ErrRetryCancelled) that may come back first.
func (s *Session) PromptAsync(ctx context.Context, text string, done func(*AssistantMessage, error)) {
	s.submit(ctx, text, nil, done)
}

// Submit is PromptAsync that also says when the session has taken the
// prompt: accepted is called exactly once, before done, with nil once the
// prompt is recorded in the history and running, or with the error that
// refused it (a limit, a busy session, a history write that failed,
// ctx ended), which done then also gets. Neither may block.
func (s *Session) Submit(ctx context.Context, text string, accepted func(error), done func(*AssistantMessage, error)) {
	s.submit(ctx, text, accepted, done)
}

// submit sends a prompt; accepted, if not nil, is Submit's.
func (s *Session) submit(ctx context.Context, text string, accepted func(error), done func(*AssistantMessage, error)) {
	if err := s.admit(ctx, text); err != nil {
		if accepted != nil {
			accepted(err)
		}
		done(nil, err)
		return
	}
	p := &promptCall{s: s, ctx: ctx, done: done, accepted: accepted}
	if ctx.Done() != nil {
		p.sending.Add(1)
		defer p.sending.Done()
		p.stopWatch = context.AfterFunc(ctx, p.cancelled)
	}
	s.at.Prompt(&protocol.PromptRequest{Text: text, Ack: accepted != nil}, p)
}

// admit checks that the session takes a prompt now, and counts it in
// flight when it does.
func (s *Session) admit(ctx context.Context, text string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.rt.CheckPrompt(text); err != nil {
		return err
	}
	if s.at.IsClosed() {
		return fmt.Errorf("musepi: prompt on session %s: %w", s.id, s.closedError())
	}
	limits := s.rt.cfg.limits
	if n := s.rt.inFlight.Add(1); limits.PromptsInFlight > 0 && n > int64(limits.PromptsInFlight) {
		s.rt.inFlight.Add(-1)
		return &LimitError{Limit: "prompts in flight", Max: limits.PromptsInFlight}
	}
	return nil
}

// promptCall is a prompt sent and not yet finished: its reply address,
// its caller's callbacks and the watch on its context, in one allocation
// (a prompt that waits out an outage keeps it, and each object it keeps
// costs the collector mark work on every cycle).
type promptCall struct {
	reply.Address
	s        *Session
	ctx      context.Context
	done     func(*AssistantMessage, error)
	accepted func(error) // Submit's (nil: PromptAsync's)
	// stopWatch stops the watch on ctx (nil: ctx never ends); false when
	// ctx ended first.
	stopWatch func() bool
	// sending is done once the prompt is sent: an abort for ctx goes
	// after it, never before.
	sending    sync.WaitGroup
	acceptOnce sync.Once
	finished   atomic.Bool
}

// replied takes the session's reply, unless ctx ended first: the watch
// finishes the prompt with ctx.Err() then.
func (p *promptCall) Replied(res interface{}, err error) {
	if p.stopWatch != nil && !p.stopWatch() {
		return
	}
	p.finish(p.s.result(res, err))
}

// acceptedAt takes the session's PromptAccepted: the prompt is recorded.
func (p *promptCall) AcceptedAt(uint64) { p.accept(nil) }

// cancelled is the watch on ctx, which ended before the reply came: the
// prompt is aborted and finishes with ctx.Err().
func (p *promptCall) cancelled() {
	p.sending.Wait()
	p.s.Abort() // queued before done runs, so it never hits a later prompt
	p.finish(nil, p.ctx.Err())
}

// accept calls Submit's accepted, once.
func (p *promptCall) accept(err error) {
	if p.accepted != nil {
		p.acceptOnce.Do(func() { p.accepted(err) })
	}
}

// finish ends the prompt, once: accepted (if not called yet), then done.
func (p *promptCall) finish(msg *AssistantMessage, err error) {
	if !p.finished.CompareAndSwap(false, true) {
		return
	}
	p.s.rt.inFlight.Add(-1)
	p.accept(err)
	p.done(msg, err)
}

// Attach waits for the result of the session's running prompt when its
// caller is gone: the prompt a session resumed from its record (it was
// waiting out a backoff when its process or node died, and goes on here),
// and returns what Prompt would have returned. A prompt that settled is
// answered at once (its result is kept until the next prompt; the history
// has it too). A later Attach replaces an earlier one,
// which returns ErrBusy; a prompt whose own caller still waits, or no
// prompt at all, returns ErrNoPrompt or ErrBusy at once. When ctx ends
// first, ctx.Err() is returned and the prompt goes on.
func (s *Session) Attach(ctx context.Context) (*AssistantMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type outcome struct {
		msg *AssistantMessage
		err error
	}
	done := make(chan outcome, 1)
	reply := reply.New(s.rt.system, reply.Func(func(res interface{}, err error) {
		msg, err := s.result(res, err)
		done <- outcome{msg, err}
	}))
	err := s.deliver(func(pid *actor.PID) {
		track.RequestFrom(s.rt.system.Root, s.rt.cfg.clock, pid, &protocol.AttachPrompt{}, reply)
	})
	if err != nil {
		s.rt.system.Root.Stop(reply)
		return nil, fmt.Errorf("musepi: attach to session %s: %w", s.id, err)
	}
	select {
	case out := <-done:
		return out.msg, out.err
	case <-ctx.Done():
		s.rt.system.Root.Stop(reply)
		return nil, ctx.Err()
	}
}

// HandOver makes the session leave this runtime without ending its prompt,
// for a node that leaves its cluster: once the session is at rest (idle,
// or waiting out a backoff; a turn or tools running finish first) its
// retry chain's record is written, a waiting Prompt returns ErrHandedOver,
// and its history is closed, so that another runtime opens the session
// and resumes the chain (NewSession, then Attach), or claims it with its
// durable timers when it is due. The session is then closed here: later
// calls return ErrSessionClosed. It needs a history store that keeps
// records (history.RecordLog) and fails otherwise, and when ctx ends first
// (the hand-over may still happen).
func (s *Session) HandOver(ctx context.Context) error {
	res, err := s.ask(ctx, &protocol.HandOver{})
	if err != nil {
		return fmt.Errorf("musepi: hand over session %s: %w", s.id, err)
	}
	if e := res.(*protocol.Ack).GetError(); e != "" {
		return fmt.Errorf("musepi: hand over session %s: %s", s.id, e)
	}
	return s.at.CloseHere(ctx)
}

// result turns the session's reply to a PromptRequest into Prompt's results.
func (s *Session) result(res interface{}, err error) (*AssistantMessage, error) {
	if errors.Is(err, reply.ErrNoSession) {
		err = s.closedError()
	}
	if err != nil {
		return nil, fmt.Errorf("musepi: prompt on session %s: %w", s.id, err)
	}
	r, ok := res.(*protocol.PromptResult)
	if !ok {
		return nil, fmt.Errorf("musepi: prompt on session %s: unexpected reply %T", s.id, res)
	}
	msg := fromWireAssistant(r.GetMessage())
	if r.GetErrorKind() == "" {
		return msg, nil
	}
	kind := kindErrors[session.ErrorKind(r.GetErrorKind())]
	if kind == nil {
		kind = ErrPromptFailed
	}
	pe := &PromptError{Kind: kind, Detail: r.GetError(), Message: msg}
	if h := r.GetHistory(); h != nil {
		pe.History = &history.Error{Op: h.GetOp(), Path: h.GetPath(), Err: errors.New(h.GetCause())}
	}
	if kind == ErrShutdown {
		pe.closed = s.closedError()
	}
	if f := r.GetRetry(); f != nil {
		pe.Retry = &RetryError{Class: f.GetClass(), Attempt: int(f.GetAttempt()), Status: int(f.GetHttpStatus()), FinalError: f.GetFinalError()}
	}
	return msg, pe
}

// send sends msg to the session's actor (started by it if need be); to a
// closed session it is dropped.
func (s *Session) send(msg hosting.Request) {
	_ = s.deliver(func(pid *actor.PID) { track.Send(s.rt.system.Root, s.rt.cfg.clock, pid, msg) })
}

// deliver runs send with the session's actor (see runner.deliver).
func (s *Session) deliver(send func(*actor.PID)) error { return s.at.Deliver(send) }

// Abort cancels a pending retry backoff first, then the active stream; the
// running Prompt returns ErrAborted.
func (s *Session) Abort() { s.send(&protocol.AbortRequest{}) }

// GuardAbort aborts the active stream on behalf of a streaming-edit guard:
// a deliberate stop, so the turn settles (the Prompt returns ErrAborted) and
// is never retried as a reason-less abort.
func (s *Session) GuardAbort() { s.send(&protocol.AbortRequest{EditGuard: true}) }

// AbortRetry cancels the retry backoff: the chain ends with
// auto_retry_end{success: false, finalError: "Retry cancelled"}.
func (s *Session) AbortRetry() { s.send(&protocol.AbortRetryRequest{}) }

// SetAutoRetryEnabled writes retry.enabled. Switched off mid-chain, the
// backoff in progress finishes and the next error ends the chain. It
// returns once the session has applied it (a read right after sees it).
func (s *Session) SetAutoRetryEnabled(enabled bool) {
	s.apply(&protocol.SetAutoRetryRequest{Enabled: enabled})
}

// apply sends a setting to the session and waits until the session has
// applied and published it; a closed session takes none. The session owns
// what callers read of its state: they never write it.
func (s *Session) apply(setting hosting.Request) { _, _ = s.ask(context.Background(), setting) }

// AutoRetryEnabled reads retry.enabled as the session last applied it.
func (s *Session) AutoRetryEnabled() bool { return s.st().AutoRetryEnabled() }

// IsRetrying reports whether a retry chain is open.
func (s *Session) IsRetrying() bool { return s.st().IsRetrying() }

// Busy reports whether a prompt is in progress.
func (s *Session) Busy() bool { return s.st().Busy() }

// IsCompacting reports whether the session's compaction hook runs (after a
// context overflow, or Compact).
func (s *Session) IsCompacting() bool { return s.st().Compacting() }

// Generation is the current prompt generation (the number of prompts taken).
func (s *Session) Generation() uint64 { return s.st().Generation() }

// SetThinkingLevel sets how much the session's next turns reason; each
// provider maps it to its own setting (OpenAI reasoning effort, Anthropic
// thinking budget).
func (s *Session) SetThinkingLevel(level provider.ThinkingLevel) {
	l := string(level)
	s.apply(&protocol.SessionOptions{ThinkingLevel: &l})
}

// SetPriority sets the pacing priority of the session's next turns (see
// WithPriority); it returns once the session applied it. An unknown
// priority is taken as Low.
func (s *Session) SetPriority(p Priority) {
	n := int32(p) // the session clamps it as it decodes it (pacing.PriorityOf)
	s.apply(&protocol.SessionOptions{Priority: &n})
}

// Priority is the session's pacing priority.
func (s *Session) Priority() Priority { return s.st().Priority() }

// ThinkingLevel is the session's thinking level.
func (s *Session) ThinkingLevel() provider.ThinkingLevel { return s.st().ThinkingLevel() }

// CompactResult is what a manual compaction did to the context.
type CompactResult struct {
	EntriesBefore, EntriesAfter int
	// FirstKeptSeq is the history seq of the first entry kept (0: none).
	FirstKeptSeq uint64
	// TokensBefore is the input tokens of the last turn before (0: unknown).
	TokensBefore int64
}

// Compact runs the runtime's compaction hook on the context now
// (the hook gets a nil failed message). It fails while a prompt runs and
// when no hook is configured.
func (s *Session) Compact(ctx context.Context) (CompactResult, error) {
	res, err := s.ask(ctx, &protocol.CompactRequest{})
	if err != nil {
		return CompactResult{}, err
	}
	r := res.(*protocol.CompactReply)
	if r.GetError() != "" {
		return CompactResult{}, fmt.Errorf("musepi: compact: %s", r.GetError())
	}
	return CompactResult{EntriesBefore: int(r.GetEntriesBefore()), EntriesAfter: int(r.GetEntriesAfter()),
		FirstKeptSeq: r.GetFirstKeptSeq(), TokensBefore: r.GetTokensBefore()}, nil
}

// SetAutoCompaction switches the compaction hook on context overflow on
// (the default) or off: off, an overflow emits compaction_required and
// ends the prompt.
func (s *Session) SetAutoCompaction(on bool) {
	s.apply(&protocol.SessionOptions{AutoCompaction: &on})
}

// AutoCompaction reports whether a compaction hook is configured and runs
// on overflow.
func (s *Session) AutoCompaction() bool {
	return s.rt.cfg.compaction != nil && s.st().AutoCompaction()
}

// Model is the "provider/model" in use (a fallback model while one applies).
func (s *Session) Model() string { return s.st().Model() }

// SetModel switches the session's primary model.
func (s *Session) SetModel(ctx context.Context, selector string) error {
	res, err := s.ask(ctx, &protocol.SetModelRequest{Model: selector})
	if err != nil {
		return err
	}
	if e := res.(*protocol.Ack).GetError(); e != "" {
		return fmt.Errorf("musepi: %s", e)
	}
	return nil
}

// Messages returns the context: what the next turn sends to the model.
func (s *Session) Messages(ctx context.Context) ([]Entry, error) {
	return s.entries(ctx, false)
}

// History returns the persisted history: everything kept, including failed
// turns that were stripped from the context and model changes.
func (s *Session) History(ctx context.Context) ([]Entry, error) {
	return s.entries(ctx, true)
}

func (s *Session) entries(ctx context.Context, history bool) ([]Entry, error) {
	res, err := s.ask(ctx, &protocol.MessagesRequest{History: history})
	if err != nil {
		return nil, err
	}
	reply := res.(*protocol.MessagesReply)
	if e := reply.GetError(); e != "" {
		return nil, fmt.Errorf("musepi: session %s: %s", s.id, e)
	}
	return fromWireEntries(reply.GetEntries()), nil
}

// ask sends a request and waits for the reply until ctx ends.
func (s *Session) ask(ctx context.Context, msg hosting.Request) (interface{}, error) {
	for try := 1; ; try++ {
		f := actor.NewFuture(s.rt.system, -1)
		var to *actor.PID
		err := s.deliver(func(pid *actor.PID) {
			to = pid
			s.at.Asked(f.PID(), pid)
			track.RequestFrom(s.rt.system.Root, s.rt.cfg.clock, pid, msg, f.PID())
		})
		if err != nil {
			s.rt.system.Root.Stop(f.PID())
			return nil, err
		}
		res, err := reply.Wait(ctx, f)
		s.at.Answered(f.PID())
		if errors.Is(err, actor.ErrDeadLetter) && try < hosting.OpenAttempts && s.at.Again(to) {
			continue
		}
		if errors.Is(err, actor.ErrDeadLetter) {
			err = s.closedError()
		}
		if err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("musepi: session %s: %w", s.id, err)
		}
		return res, err
	}
}

// st is the state callers read without asking the actor: its own, or
// for a handle of a session hosted elsewhere, its mirror as the hosting
// node reports it now.
func (s *Session) st() *actors.SessionState { return s.at.State() }

// closedError is why a call reached no session: the runtime was shut down
// (ErrRuntimeClosed), or the session was closed (ErrSessionClosed).
func (s *Session) closedError() error {
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	if s.rt.closed {
		return ErrRuntimeClosed
	}
	return ErrSessionClosed
}

// Subscribe calls fn with every event of the session, in order, from a
// goroutine of its own; a slow fn never blocks the session, and when it
// falls behind it misses deltas first, never a terminal event (see
// WithEventQueueLen). The returned function unsubscribes.
func (s *Session) Subscribe(fn func(Event)) (unsubscribe func()) {
	unsub := s.events.Subscribe(goEvents(fn))
	s.at.Watch() // a cluster's activation relays the events while anyone listens
	return func() {
		unsub()
		s.at.Watch()
	}
}

// goEvents gives fn the Go form of each wire event.
func goEvents(fn func(Event)) func(*messages.SessionEvent) {
	return func(ev *messages.SessionEvent) {
		if e, ok := fromWireEvent(ev); ok {
			fn(e)
		}
	}
}

// Close stops the session; a waiting Prompt returns ErrShutdown.
func (s *Session) Close(ctx context.Context) error { return s.at.Close(ctx) }
