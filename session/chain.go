package session

import (
	"fmt"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// ChainPhase is where the retry chain of a session's prompt stands (spec
// 3): every phase but ChainIdle means the chain is open, from the first
// retryable failure until it ends.
type ChainPhase uint8

// The phases of a retry chain.
const (
	ChainIdle          ChainPhase = iota // no chain open
	AwaitingCredential                   // asked the credentials actor to switch
	AwaitingFallback                     // asked the model-fallback actor to switch
	AwaitingBudget                       // asked the provider's retry budget when the retry may go
	Sleeping                             // the backoff sleep is running
	AwaitingTurn                         // continue scheduled; waiting for the turn to end
)

var phaseNames = [...]string{"idle", "awaiting_credential", "awaiting_fallback", "awaiting_budget", "sleeping", "awaiting_turn"}

func (p ChainPhase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "unknown"
}

// asking reports whether the chain waits for another actor's answer.
func (p ChainPhase) asking() bool {
	return p == AwaitingCredential || p == AwaitingFallback || p == AwaitingBudget
}

// ParseChainPhase is the phase named name (ChainPhase.String), false for
// none.
func ParseChainPhase(name string) (ChainPhase, bool) {
	for p, n := range phaseNames {
		if n == name {
			return ChainPhase(p), true
		}
	}
	return 0, false
}

// ChainRecord is a retry chain's state as plain values, the part of a
// Record that lets another process go on with the chain where it stood
// (the same attempt, the same token).
//
// wire: reserved 6 now_unix_nano: the chain's last step, which nothing read
type ChainRecord struct {
	// The small fields first, packed together.
	Phase           ChainPhase  `wire:"1"`
	Started         bool        `wire:"3"`  // auto_retry_start was emitted in this chain
	Class           retry.Class `wire:"9"`  // of the attempt being decided
	Switched        bool        `wire:"14"` // the attempt being decided switched key or model
	FallbackApplied bool        `wire:"15"`

	Attempt    int    `wire:"2"`
	Token      uint64 `wire:"4"` // of the request or timer the chain waits for
	Generation uint64 `wire:"5"` // prompt generation of the failing turn

	HeldToken uint64    `wire:"7"` // the budget ask whose release may still move the sleep
	AskedAt   time.Time `wire:"8"` // when the budget was asked

	// The attempt being decided (and its Class, Switched and
	// FallbackApplied above).
	ErrText  string        `wire:"10"`
	Delay    time.Duration `wire:"11"`
	Wait     time.Duration `wire:"12"`
	Cooldown time.Duration `wire:"13"`

	FallbackModel string `wire:"16"`
	FallbackRole  string `wire:"17"`
}

// continueDelay is the delay of the continue a retry schedules after its
// backoff sleep (spec 3 step 13).
const continueDelay = time.Millisecond

// maxAttempt bounds the chain's counter so it never overflows.
const maxAttempt = 1<<31 - 1

// chainStep runs one input of the retry chain (step), then what the
// decision it completes calls for: agent_end first, saying whether the
// chain goes on; the tools of a tool-use turn; compaction; or the state
// that follows the chain's phase. A usage limit on a provider without
// credentials is answered right after, as its own step (noSwitch).
func (c *Core) chainStep(step func()) {
	for {
		c.chainStepOnce(step)
		if !c.noSwitch {
			return
		}
		c.noSwitch = false
		step = func() { c.credentialReplied(false, time.Time{}) }
	}
}

// chainStepOnce is one step of chainStep.
func (c *Core) chainStepOnce(step func()) {
	deciding := c.r.State == Deciding
	mark := len(c.out.list) // agent_end goes before what the step adds
	c.compactNext = false
	step()
	phase := c.r.Chain.Phase
	decided := deciding && !phase.asking()
	calls := c.toolsAfterEnd
	if decided {
		c.toolsAfterEnd = nil
		if calls == nil {
			ev := c.emitAt(mark, EventAgentEnd)
			ev.Message, ev.WillRetry = c.r.Last, phase == Sleeping
		}
	}
	switch {
	case decided && calls != nil && c.r.Aborts.User:
		c.decide(c.r.Last) // aborted before the tools ran
	case decided && calls != nil:
		c.runTools(calls)
	case c.compactNext:
		c.compact()
	case c.r.State == Deciding || c.r.State == Backoff || c.r.State == ContinueScheduled:
		c.follow(phase)
	}
}

// follow moves a session waiting on its retry chain to the chain's phase,
// settling when the chain is over.
func (c *Core) follow(phase ChainPhase) {
	switch phase {
	case AwaitingCredential, AwaitingFallback, AwaitingBudget:
		c.r.State = Deciding
	case Sleeping:
		c.r.State = Backoff
	case AwaitingTurn:
		// sleepDone set ContinueScheduled.
	default:
		c.settle()
	}
}

// decide hands the turn's last message to the retry chain (agent_end).
func (c *Core) decide(msg *messages.AssistantMessage) {
	c.r.State = Deciding
	c.chainStep(func() { c.turnDecided(msg) })
}

// turnDecided is the chain's part of a turn's end: the outcome for the
// budget, then success, a retry (spec 3 steps 1-8) or the end.
func (c *Core) turnDecided(msg *messages.AssistantMessage) {
	ch := &c.r.Chain
	ch.Generation = c.r.Generation
	if ch.Phase == Sleeping {
		c.add(CancelTimer).Token = ch.Token
	}
	ch.Token++ // a turn ended: any reply or timer still in flight is stale
	c.dropHold()
	if ch.Phase != ChainIdle {
		ch.Phase = AwaitingTurn
	}
	var rd retry.Reading // the error text, read once for the whole decision
	class := rd.Classify(msg, c.r.Aborts)
	if class.Retryable() && c.r.Aborts.Any() {
		// A deliberate abort (user, dispose, edit guard) settles the turn,
		// whatever error the stream ended with while it was being aborted.
		class = retry.NotRetryable
	}
	if c.budgetOn() && c.r.AutoRetry {
		switch {
		case class == retry.Success:
			c.reportOutcome(true)
		case class.LoadsProvider():
			c.reportOutcome(false)
		}
	}
	switch {
	case class == retry.Success:
		if ch.Phase != ChainIdle {
			if ch.FallbackApplied {
				c.emitFallback(EventFallbackSucceeded, retry.FallbackEvent{To: ch.FallbackModel, Role: ch.FallbackRole})
			}
			c.endChain(true, ch.Attempt, "")
		}
	case class.Retryable():
		c.retryable(msg, class, &rd)
	default:
		if ch.Phase != ChainIdle {
			c.endChain(false, ch.Attempt, retry.FinalError(msg))
		}
		if class == retry.ContextOverflow {
			c.compactNext = true
		}
	}
}

// budgetOn reports whether the retry budget is on for the model in use:
// retry.budget on, and its provider has a budget.
func (c *Core) budgetOn() bool {
	return c.settings.Budget.Enabled && c.budgeted[provider(c.r.Model)]
}

// reportOutcome tells the provider's retry budget how a request went.
func (c *Core) reportOutcome(success bool) {
	e := c.add(ReportOutcome)
	e.Model, e.Success = c.r.Model, success
}

// retryable runs steps 1-8 of the flow; it continues in
// credentialReplied, fallbackReplied and decideDelay.
func (c *Core) retryable(msg *messages.AssistantMessage, class retry.Class, rd *retry.Reading) {
	ch, s := &c.r.Chain, c.settings
	if !c.r.AutoRetry {
		if ch.Phase != ChainIdle {
			c.endChain(false, ch.Attempt, retry.FinalError(msg))
		}
		return
	}
	if ch.Attempt < maxAttempt {
		ch.Attempt++
	}
	if ch.Phase == ChainIdle {
		ch.Phase = AwaitingTurn
	}
	ch.Class = class
	ch.ErrText = retry.FinalError(msg)
	if ch.Attempt > s.MaxRetries {
		c.endChain(false, ch.Attempt-1, ch.ErrText)
		return
	}
	ch.Switched = false
	ch.Delay = retry.Backoff(ch.Attempt, s.BaseDelay, c.src.Float64())
	hint, hasHint := rd.Hint(msg.GetHeaders(), ch.ErrText, c.now)
	_, estimate := rd.LimitWait(ch.ErrText, int(msg.GetHttpStatus()), c.src.Float64())
	ch.Cooldown = estimate
	if hasHint {
		ch.Cooldown = hint.Delay
	}
	switch class {
	case retry.StaleReplay:
		c.add(ResetProviderSession).Model = c.r.Model
		ch.Delay = 0
	case retry.UsageLimit:
		ch.Wait = ch.Cooldown
		ch.Phase = AwaitingCredential
		c.askCredentialSwitch(ch.Wait)
		return
	default:
		if hasHint {
			ch.Delay = max(ch.Delay, hint.Delay)
		}
	}
	c.askFallback()
}

// askCredentialSwitch asks the credentials actor to switch from the
// session's key, blocked for blockFor; a provider without credentials has
// no key to switch to, and the core answers so itself (noSwitch).
func (c *Core) askCredentialSwitch(blockFor time.Duration) {
	if !c.credentialed[provider(c.r.Model)] {
		c.noSwitch = true
		return
	}
	ask := c.add(AskCredentialSwitch)
	ask.Model, ask.BlockFor, ask.Token = c.r.Model, blockFor, c.r.Chain.Token
}

// credentialReplied takes the credentials actor's answer: switched, or
// when the earliest blocked sibling frees up (zero: none).
func (c *Core) credentialReplied(switched bool, retryAt time.Time) {
	ch := &c.r.Chain
	if switched {
		ch.Switched = true
		ch.Delay = 0
	} else {
		wait := ch.Wait
		if !retryAt.IsZero() {
			wait = min(wait, retryAt.Add(time.Second).Sub(c.now))
		}
		ch.Delay = max(ch.Delay, wait)
	}
	c.askFallback()
}

// askFallback is step 8: without a credential switch, ask for the next model.
func (c *Core) askFallback() {
	ch := &c.r.Chain
	if !ch.Switched && c.settings.ModelFallback && !c.noFallbackChain && ch.Class.AllowsModelFallback() {
		ch.Phase = AwaitingFallback
		pin := ch.Class == retry.ClassifierRefusal
		cooldown := ch.Cooldown
		if pin {
			cooldown = 0
		}
		c.askPin = pin
		ask := c.add(AskFallback)
		ask.Model, ask.Primary, ask.Role = c.r.Model, c.r.Primary, c.r.Role
		ask.BlockFor, ask.Pin, ask.Token = cooldown, pin, ch.Token
		return
	}
	if ch.Class == retry.ClassifierRefusal {
		c.endRefusal()
		return
	}
	c.decideDelay()
}

// fallbackReplied takes the model-fallback actor's answer: a switch
// applies the fallback model.
func (c *Core) fallbackReplied(in Input) {
	ch := &c.r.Chain
	if !in.Switched {
		if ch.Class == retry.ClassifierRefusal {
			c.endRefusal()
			return
		}
		c.decideDelay()
		return
	}
	ch.Switched = true
	ch.Delay = 0
	ch.FallbackApplied = true
	ch.FallbackModel, ch.FallbackRole = in.To, in.Role
	before := c.modelState()
	c.r.Pinned = c.askPin
	c.switchModel(in.To, "fallback")
	c.r.Before = before
	c.emitFallback(EventFallbackApplied, retry.FallbackEvent{From: in.From, To: in.To, Role: in.Role})
	c.decideDelay()
}

// decideDelay runs steps 9-12: the max-delay fail-fast, then start and
// sleep.
func (c *Core) decideDelay() {
	ch, s := &c.r.Chain, c.settings
	if !ch.Switched && s.MaxDelay > 0 && ch.Delay > s.MaxDelay {
		c.endChain(false, ch.Attempt, fmt.Sprintf("provider asked for %d ms, more than retry.maxDelayMs (%d ms): %s",
			ch.Delay.Milliseconds(), s.MaxDelay.Milliseconds(), ch.ErrText))
		return
	}
	if c.budgetOn() && !ch.Switched && ch.Class != retry.StaleReplay {
		// Step 10a (beyond the reference policy): the provider's retry
		// budget may hold the retry back; a switched retry is a first
		// attempt on another credential or model and is not held, nor is
		// a stale replay, which is not the provider failing under load.
		ch.Phase = AwaitingBudget
		ch.AskedAt = c.now
		ask := c.add(AskBudget)
		ask.Model, ask.Token, ask.Due = c.r.Model, ch.Token, c.now.Add(ch.Delay)
		if s.MaxDelay > 0 {
			ask.Latest = c.now.Add(s.MaxDelay)
		}
		return
	}
	c.startRetry(0, ch.Delay)
}

// budgetAnswer takes what the budget answers the chain's ask (a grant),
// or later for a retry it held (a release), unless it answers another ask.
func (c *Core) budgetAnswer(in Input) {
	ch := &c.r.Chain
	switch {
	case in.Kind == InBudgetGrant && ch.Phase == AwaitingBudget && in.Token == ch.Token:
		c.budgetGranted(in.At)
	case in.Kind == InBudgetRelease && ch.Phase == Sleeping && ch.HeldToken != 0 && in.Token == ch.HeldToken:
		c.budgetReleased(in.At)
	}
}

// budgetGranted takes the budget's answer: the retry goes out at at.
func (c *Core) budgetGranted(at time.Time) {
	ch := &c.r.Chain
	due := ch.AskedAt.Add(ch.Delay)
	if at.Before(due) {
		at = due // never before the backoff
	}
	extra := at.Sub(due)
	if extra > 0 {
		ch.HeldToken = ch.Token
	}
	c.startRetry(extra, max(at.Sub(c.now), 0))
}

// dropHold tells the budget that a held retry (or one it is being asked
// about, which it may hold) will not go out after all, so that a release
// is not spent on it.
func (c *Core) dropHold() {
	if c.r.Chain.HeldToken != 0 || c.r.Chain.Phase == AwaitingBudget {
		c.r.Chain.HeldToken = 0
		c.add(DropBudgetHold).Model = c.r.Model
	}
}

// budgetReleased moves a held retry's sleep to end at at (the budget
// recovered before the retry's slot).
func (c *Core) budgetReleased(at time.Time) {
	ch := &c.r.Chain
	ch.HeldToken = 0
	c.add(CancelTimer).Token = ch.Token
	ch.Token++
	c.sleep(max(at.Sub(c.now), 0))
}

// startRetry runs steps 11-12: auto_retry_start, then the backoff sleep
// for sleep. The event's delay counts from the decision, extra of it
// added by the budget.
func (c *Core) startRetry(extra, sleep time.Duration) {
	ch := &c.r.Chain
	ch.Started = true
	ch.Delay += extra
	start := c.out.starts.add()
	*start = retry.StartEvent{Attempt: ch.Attempt, MaxAttempts: c.settings.MaxRetries, Delay: ch.Delay,
		ErrorMessage: ch.ErrText, Class: ch.Class, BudgetDelay: extra}
	c.emit(EventAutoRetryStart).Start = start
	c.add(StripTrailingError)
	ch.Token++
	c.sleep(sleep)
}

// sleep starts the backoff sleep of the chain's token for d.
func (c *Core) sleep(d time.Duration) {
	c.r.Chain.Phase = Sleeping
	c.r.State = Backoff
	c.r.SleepUntil = c.now.Add(d)
	c.armTimer(d)
}

// sleepDone ends the backoff sleep of token: the retry's continue is due
// (the timer's owner scheduled it behind the sleep).
func (c *Core) sleepDone(token uint64) {
	if c.r.Chain.Phase != Sleeping || token != c.r.Chain.Token {
		return
	}
	c.r.Chain.HeldToken = 0 // the held retry goes out now: nothing left to drop
	c.r.Chain.Phase = AwaitingTurn
	c.r.State = ContinueScheduled
}

// lastStarted is the attempt of the open chain's last auto_retry_start:
// the chain's attempt, less the one being decided while it asks.
func (c *Core) lastStarted() int {
	if c.r.Chain.Phase.asking() {
		return c.r.Chain.Attempt - 1
	}
	return c.r.Chain.Attempt
}

// endRefusal ends a chain whose classifier refusal found no fallback
// model: silently if no attempt of this chain was started, else reporting
// the last started attempt.
func (c *Core) endRefusal() {
	if !c.r.Chain.Started {
		c.resetChain()
		return
	}
	c.endChain(false, c.r.Chain.Attempt-1, c.r.Chain.ErrText)
}

// abortRetry cancels the chain (abort_retry, or the global abort).
func (c *Core) abortRetry() {
	switch c.r.Chain.Phase {
	case ChainIdle:
		return
	case Sleeping:
		c.add(CancelTimer).Token = c.r.Chain.Token
	}
	c.dropHold()
	c.endChain(false, c.r.Chain.Attempt, retry.RetryCancelled)
}

// endChain emits auto_retry_end and closes the chain; a chain that failed
// is the prompt's failure (unless a history write failed first).
func (c *Core) endChain(success bool, attempt int, finalError string) {
	end := retry.EndEvent{Success: success, Attempt: attempt, FinalError: finalError, Class: c.r.Chain.Class}
	if success {
		c.r.RetryEnd = nil
	} else {
		c.r.RetryEnd = &end
	}
	if !success && c.r.FailureKind != KindHistory {
		c.r.Failure = finalError
		if c.r.Failure == retry.RetryCancelled && c.r.FailureKind == "" {
			c.r.FailureKind = KindRetryCancelled
		}
	}
	c.emitEnd(end)
	c.resetChain()
}

// resetChain closes the chain: the counter goes back to 0, and any reply
// or timer still in flight is stale.
func (c *Core) resetChain() {
	ch := &c.r.Chain
	ch.Phase = ChainIdle
	ch.Attempt = 0
	ch.Started = false
	ch.FallbackApplied = false
	ch.FallbackModel, ch.FallbackRole = "", ""
	ch.ErrText = ""
	ch.Token++
}
