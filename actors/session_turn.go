package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/history"

	"github.com/musepi/musepi/internal/dispatch"
	"github.com/musepi/musepi/internal/track"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/session"
)

// turnRunner runs a session's turns, tools and compactions, each in a
// goroutine of its own that answers the actor with a message, and cancels
// the turn or tools running. What the next turn needs of it is kept while
// the session is passivated (no turn runs then).
type turnRunner struct {
	cfg  *SessionConfig
	deps *Deps
	// holder is the session's history when it can be held (shared
	// between nodes; nil: it cannot), asked once rather than at each turn.
	holder    history.Holder
	running   *runContext // of the turn or tools running, until they finish (nil: none)
	turnModel string      // "provider/model" of the turn running
	// oversize is why the next turn cannot go out: pacing found it too
	// large for every key of its provider ("": it can).
	oversize string
	// firstToken is the time to first token of the turn that ended last,
	// which its settle tells the overload limiter.
	firstToken time.Duration
}

// start streams turn on model with credential, on the context entries, in
// its own goroutine; deltas and the final message come back as turnDelta
// and turnFinished. A turn that cannot go out ends at once (pending).
func (tr *turnRunner) start(ctx actor.Context, pending *[]session.Input, entries []*messages.Entry, turn uint64, model, credential string) {
	provName, modelName, _ := retry.SplitModel(model) // once: providerOf and modelOf would split it three times
	prov := tr.deps.Providers[provName]
	if prov == nil {
		*pending = append(*pending, session.Input{Kind: session.InTurnEnded, Turn: turn,
			Message: provider.Failure(0, fmt.Sprintf("no provider %q for model %q", provName, model), nil)})
		return
	}
	if tr.taken() { // known already: nothing to check
		*pending = append(*pending, session.Input{Kind: session.InTaken})
		return
	}
	if why := tr.oversize; why != "" { // no key can ever take it: it fails without going out
		tr.oversize = ""
		*pending = append(*pending, session.Input{Kind: session.InTurnEnded, Turn: turn, Message: provider.Failure(http.StatusBadRequest, why, nil)})
		return
	}
	n := len(entries)
	req := requests.Get().(*provider.Request)
	*req = provider.Request{
		SessionID:  tr.cfg.ID,
		Model:      modelName,
		Credential: credential,
		APIKey:     tr.deps.Keys[provName][credential],
		// The context as it stands: the session only appends past its
		// end, or swaps the whole slice, while the turn runs.
		Context:  entries[:n:n],
		Tools:    tr.deps.toolSpecs(),
		Thinking: tr.cfg.State.ThinkingLevel(),
	}
	t := &turnRun{
		prov: prov, clk: tr.deps.Clock, root: ctx.ActorSystem().Root, self: ctx.Self(),
		watch: tr.deps.watchdog(), maxBytes: tr.deps.MaxResponseBytes, req: req,
		finished: turnFinished{turn: turn},
	}
	tr.guard(t)
	tr.tellLimits(t, provName)
	tr.running = &t.runContext
	tr.turnModel = model
	t.clk.Begin()
	tr.deps.goroutine(t)
}

// guard holds t, as it starts and just before each request goes out,
// while the session's history (when it can be held) is not decided, and
// marks t taken when another holder has it.
func (tr *turnRunner) guard(t *turnRun) {
	h := tr.holder
	if h == nil {
		return
	}
	hold := holdUntilDecided(h, tr.deps.Clock, tr.deps.Log, tr.cfg.ID)
	t.guard = func(ctx context.Context) error {
		err := hold(ctx)
		if errors.Is(err, history.ErrTaken) {
			t.taken.Store(true)
		}
		return err
	}
}

// tellLimits has t send the session the rate limits its response's
// headers announce as they arrive, when its provider paces its calls: the
// core tells the pacer (session.InRateLimits).
func (tr *turnRunner) tellLimits(t *turnRun, provName string) {
	if tr.deps.Credentials[provName] == nil || !tr.deps.shared().paced[provName] {
		return
	}
	t.tellLimits = func(l *messages.RateLimits) {
		t.limitsTold.Store(true)
		track.Send(t.root, t.clk, t.self, &turnLimits{turn: t.finished.turn, limits: l, arrived: t.clk.Now()})
	}
}

// cancel stops the running turn, if any.
func (tr *turnRunner) cancel() {
	if tr.running != nil {
		tr.running.cancel(context.Canceled)
		tr.running = nil
	}
}

// resetProviderSession drops what model's provider keeps for the session
// (a stored previous_response_id): a stale replay starts afresh.
func (tr *turnRunner) resetProviderSession(model string) {
	if p := tr.deps.Providers[providerOf(model)]; p != nil {
		p.ResetSession(tr.cfg.ID)
	}
}

// turnRun is one turn's provider stream in its goroutine, with its idle
// watchdog and its response size bound; the stream runs under the turn's
// runContext.
// requests lend the turns the request they hand their goroutine, which
// takes a copy as it starts: a turn keeps no request while it streams
// (120 bytes fewer to allocate and collect at each attempt).
var requests = sync.Pool{New: func() any { return new(provider.Request) }}

type turnRun struct {
	runContext
	prov provider.Provider
	req  *provider.Request // lent by requests until Run takes it (nil: none)
	clk  clock.Clock
	root *actor.RootContext
	self *actor.PID

	// watch cancels the stream once it has sent nothing for the runtime's
	// idle time (nil: no watchdog); lastData is when it last sent (unix ns).
	watch      *watchdog
	lastData   atomic.Int64
	prev, next *turnRun // in the watchdog's list, guarded by its mutex

	maxBytes int // bound on the streamed bytes (0: none); n counts them
	n        int

	// guard is checked just before each HTTP request of the turn
	// (provider.WithGuard; nil: none); taken is set when it found the
	// session another activation's.
	guard func(context.Context) error
	// tellLimits sends the session the limits the response's headers
	// announce as they arrive (provider.WithLimitsSeen; nil: not paced);
	// limitsTold says it did, and the final message then carries none.
	tellLimits        func(*messages.RateLimits)
	taken, limitsTold atomic.Bool // side by side: no padding after each

	// started is when Run started.
	started time.Time

	// finished is the message Run ends with, sent from here: the turn's
	// allocation holds it. Its turn is the turn's number from the start,
	// its firstToken how long the first delta took (0: none yet). (The
	// turn is 256 bytes: its request lent, its number and first token
	// kept once.)
	finished turnFinished
}

// errStreamStalled is the cause a turn is cancelled with by its watchdog.
var errStreamStalled = errors.New("stream stalled")

// Run streams the turn and sends its deltas and final message to the
// session (a turn is the dispatch.Task of its goroutine).
func (t *turnRun) Run() {
	defer t.clk.End()
	defer t.cancel(context.Canceled)
	req := t.takeRequest()
	t.started = t.clk.Now()
	if t.watch != nil {
		t.lastData.Store(t.clk.Now().UnixNano())
		t.watch.add(t)
	}
	var ctx context.Context = &t.runContext
	var msg *messages.AssistantMessage
	if t.guard != nil {
		if err := t.guard(ctx); err != nil { // another activation's (taken), or aborted while it could not tell
			msg = provider.Aborted(nil)
		}
		ctx = provider.WithGuard(ctx, t.guard)
	}
	if t.tellLimits != nil {
		ctx = provider.WithLimitsSeen(ctx, t.tellLimits)
	}
	if msg == nil {
		msg = streamContained(ctx, t.prov, req, t.onDelta)
	}
	if t.watch != nil {
		t.watch.remove(t)
	}
	switch cause := t.cancelCause(); {
	case errors.Is(cause, errStreamStalled):
		msg = stalled(msg, t.watch.idle)
	case errors.Is(cause, errResponseTooLarge):
		msg = tooLarge(msg, t.maxBytes)
	}
	if t.limitsTold.Load() { // the session has them
		msg.RateLimits = nil
	}
	if t.finished.firstToken == 0 { // not streamed: the whole answer
		t.finished.firstToken = t.clk.Now().Sub(t.started)
	}
	t.finished.msg, t.finished.taken = msg, t.taken.Load()
	track.Send(t.root, t.clk, t.self, &t.finished)
}

// takeRequest is the turn's request, whose lent copy goes back to
// requests.
func (t *turnRun) takeRequest() provider.Request {
	if t.req == nil {
		return provider.Request{}
	}
	req := *t.req
	*t.req = provider.Request{}
	requests.Put(t.req)
	t.req = nil
	return req
}

// onDelta passes a delta within the size bound on to the session.
func (t *turnRun) onDelta(d provider.Delta) {
	if t.watch != nil {
		t.lastData.Store(t.clk.Now().UnixNano())
	}
	if t.finished.firstToken == 0 {
		t.finished.firstToken = max(t.clk.Now().Sub(t.started), 1)
	}
	if t.withinBound(len(d.Text)) {
		track.Send(t.root, t.clk, t.self, &turnDelta{turn: t.finished.turn, kind: d.Kind, text: d.Text})
	}
}

// withinBound counts n more streamed bytes and reports whether they are
// within the bound; the first time they are not, it cancels the turn.
func (t *turnRun) withinBound(n int) bool {
	if t.maxBytes <= 0 {
		return true
	}
	if t.n > t.maxBytes {
		return false
	}
	t.n += n
	if t.n > t.maxBytes {
		t.cancel(errResponseTooLarge)
		return false
	}
	return true
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

// runTools runs the tool calls of turn in order in one goroutine, each
// told to the subscribers (events) as it starts. Calls that cannot run end
// at once (pending).
func (tr *turnRunner) runTools(ctx actor.Context, pending *[]session.Input, events *eventPublisher, turn uint64, calls []*messages.ToolCall) {
	if tr.taken() { // known already: nothing to check
		*pending = append(*pending, session.Input{Kind: session.InTaken})
		return
	}
	var hold func(context.Context) error
	if h := tr.holder; h != nil {
		hold = holdUntilDecided(h, tr.deps.Clock, tr.deps.Log, tr.cfg.ID)
	}
	tools := map[string]Tool{}
	for _, t := range tr.deps.Tools {
		tools[t.Name] = t
	}
	for _, c := range calls {
		events.emitWire(func(ev *messages.SessionEvent) {
			ev.Event = &messages.SessionEvent_ToolExecutionStart{ToolExecutionStart: &messages.ToolExecutionStart{Call: c}}
		})
	}
	toolCtx := new(runContext)
	tr.running = toolCtx
	clk, root, self := tr.deps.Clock, ctx.ActorSystem().Root, ctx.Self()
	clk.Begin()
	tr.deps.goroutine(dispatch.Func(func() {
		defer clk.End()
		defer toolCtx.cancel(context.Canceled)
		if hold != nil {
			if err := hold(toolCtx); err != nil { // another activation's, or aborted while it could not tell
				track.Send(root, clk, self, notRun(turn, calls, err))
				return
			}
		}
		results := make([]*messages.ToolResult, 0, len(calls))
		for _, c := range calls {
			results = append(results, runTool(toolCtx, tools, c))
		}
		track.Send(root, clk, self, &toolsFinished{turn: turn, results: results})
	}))
}

// notRun is the end of tool calls that did not run because the session's
// hold said no: taken, when another activation has the session (it acts
// no more), else error results with why (the turn was aborted).
func notRun(turn uint64, calls []*messages.ToolCall, err error) *toolsFinished {
	if errors.Is(err, history.ErrTaken) {
		return &toolsFinished{turn: turn, taken: true}
	}
	results := make([]*messages.ToolResult, len(calls))
	for i, c := range calls {
		results[i] = &messages.ToolResult{ToolCallId: c.GetId(), Name: c.GetName(), Output: "not run: " + err.Error(), IsError: true}
	}
	return &toolsFinished{turn: turn, results: results}
}

// taken reports whether the session's history already knows that
// another activation has the session (history.Holder's Taken).
func (tr *turnRunner) taken() bool {
	return tr.holder != nil && tr.holder.Taken()
}

// holdTimeout bounds the check of hold.
const holdTimeout = 5 * time.Second

// hold asks a history shared between nodes (history.Holder) whether the
// session is still this activation's before it acts: another node may
// have taken it over while this one was paused or cut off. An error ends
// the prompt like a failed history write, with nothing started.
func (tr *turnRunner) hold() error {
	h := tr.holder
	if h == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), holdTimeout)
	defer cancel()
	if err := h.Hold(ctx); err != nil {
		level := slog.LevelWarn
		if errors.Is(err, history.ErrTaken) { // certain, and said once for the node
			level = slog.LevelDebug
		}
		tr.deps.Log.LogAttrs(ctx, level, "not acting for the session: this node may no longer hold it",
			slog.Any("error", err), slog.String("session", tr.cfg.ID))
		return err
	}
	return nil
}

// holdRetry is how often a session whose hold cannot be told (its
// history's database out of reach) asks again.
const holdRetry = time.Second

// holdUntilDecided is h.Hold for a turn's goroutine: it asks until the
// answer is certain, nil (the session is this activation's: act) or
// history.ErrTaken (another's: act no more), or until ctx ends (the turn
// was aborted). While it cannot tell (the database out of reach, the
// node's lease not renewed) the session neither acts nor gives up: its
// chain is left as it stands, and is ended only by the retry policy. A
// cluster node that cannot renew its lease steps aside from the
// membership meanwhile, so that its hold soon answers ErrTaken and the
// session goes on at another node once the lease has lapsed (see
// cluster.Join). Waiting is logged once per turn. It runs in a goroutine
// that is a unit of work on clk (a turn's, or its tools').
func holdUntilDecided(h history.Holder, clk clock.Clock, log *slog.Logger, id string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		for logged := false; ; logged = true {
			hctx, cancel := context.WithTimeout(ctx, holdTimeout)
			err := h.Hold(hctx)
			cancel()
			switch {
			case err == nil || errors.Is(err, history.ErrTaken):
				return err
			case ctx.Err() != nil:
				return ctx.Err()
			case !logged:
				log.Warn("not acting for the session until its hold can be checked (the chain stays as it is)",
					slog.Any("error", err), slog.String("session", id))
			}
			if !pause(ctx, clk, holdRetry) {
				return ctx.Err()
			}
		}
	}
}

// pause waits d on clk, or until ctx ends (false). The caller is a unit
// of work in flight on clk (Begin); it is not while it waits, so that a
// virtual clock can move on to the pause's end, and is again once it
// returns (the timer's callback begins it, from within the clock's
// advance).
func pause(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	clk.End()
	wake := make(chan struct{})
	timer := clk.AfterFunc(d, func() {
		clk.Begin()
		close(wake)
	})
	select {
	case <-wake:
		return true
	case <-ctx.Done():
		if timer.Stop() {
			clk.Begin()
		} else {
			<-wake // it fired as ctx ended: its Begin stands
		}
		return false
	}
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

// compact runs the compaction hook of Compact e on the context entries,
// in its own goroutine; the outcome comes back as compactionFinished. An
// overflow's compaction (e.Message: the turn that overflowed) with
// automatic compaction off ends the prompt at once (pending); one asked for
// between prompts runs whatever the setting.
func (tr *turnRunner) compact(ctx actor.Context, pending *[]session.Input, entries []*messages.Entry, e *session.Effect, auto bool) {
	gen, failed := e.Generation, e.Message
	if failed != nil && !auto {
		*pending = append(*pending, session.Input{Kind: session.InCompactionDone, Generation: gen, Err: failed.GetErrorMessage()})
		return
	}
	hook, clk, root, self, id := tr.deps.Compaction, tr.deps.Clock, ctx.ActorSystem().Root, ctx.Self(), tr.cfg.ID
	before := append([]*messages.Entry(nil), entries...)
	if n := len(before); n > 0 && isFailure(before[n-1].GetAssistant()) {
		before = before[:n-1] // the failed turn itself is passed as failed
	}
	clk.Begin()
	tr.deps.goroutine(dispatch.Func(func() {
		defer clk.End()
		done := &compactionFinished{generation: gen}
		func() {
			defer func() {
				if r := recover(); r != nil {
					done.err = fmt.Sprintf("compaction hook panicked: %v", r)
				}
			}()
			entries, err := hook(context.Background(), id, before, failed)
			if err != nil {
				done.err = err.Error()
			}
			done.context = entries
		}()
		track.Send(root, clk, self, done)
	}))
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
