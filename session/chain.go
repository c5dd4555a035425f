package session

import (
	"fmt"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// ChainRecord is a retry chain's state as plain values, the part of a
// Record that lets another process go on with the chain where it stood
// (the same attempt, the same token). The chain is open while Attempt is
// above 0; where it stands (asking, sleeping) is the session's State.
//
// wire: reserved 1 phase: where the chain stood, which the session's state says
// wire: reserved 6 now_unix_nano: the chain's last step, which nothing read
type ChainRecord struct {
	// The small fields first, packed together.
	Started         bool        `wire:"3"`  // auto_retry_start was emitted in this chain
	Class           retry.Class `wire:"9"`  // of the attempt being decided
	Switched        bool        `wire:"14"` // the attempt being decided switched key or model
	FallbackApplied bool        `wire:"15"`

	Attempt    int    `wire:"2"` // of the attempt being decided, or made (0: no chain open)
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
// backoff (spec 3 step 13).
const continueDelay = time.Millisecond

// maxAttempt bounds the chain's counter so it never overflows.
const maxAttempt = 1<<31 - 1

// decide hands a turn's last message to the retry chain (agent_end); a
// tool-use message's calls run once the chain it ends is closed. A usage
// limit on a provider without credentials has no key to switch to: the
// core answers its own ask as the credentials actor would with one key.
func (c *Core) decide(msg *messages.AssistantMessage, calls []*messages.ToolCall) {
	mark := len(c.out.list) // agent_end goes before what the decision adds
	class := c.turnDecided(msg)
	switch {
	case c.r.State == AwaitingCredential && !c.credentialed[provider(c.r.Model)]:
		c.credentialReply(Input{Kind: InCredentialReply, Token: c.r.Chain.Token})
	case calls != nil:
		c.runTools(calls)
	default:
		c.decided(mark, class == retry.ContextOverflow)
	}
}

// decided goes on from a turn's decision once it asks no more: agent_end
// (at mark, before what the decision's last input added) says whether the
// chain retries, and the session backs off, compacts a context overflow
// or settles.
func (c *Core) decided(mark int, overflow bool) {
	if c.r.State.asking() && c.IsRetrying() {
		return // another actor's answer is awaited
	}
	c.agentEnd(mark)
	switch {
	case c.r.State == Backoff:
	case overflow:
		c.compact()
	default:
		c.settle()
	}
}

// agentEnd emits agent_end at index mark of the step's effects.
func (c *Core) agentEnd(mark int) {
	ev := c.emitAt(mark, EventAgentEnd)
	ev.Message, ev.WillRetry = c.r.Last, c.r.State == Backoff
}

// turnDecided is the chain's part of a turn's end: the outcome for the
// budget, then success, a retry (spec 3 steps 1-8) or the end. It returns
// the message's class.
func (c *Core) turnDecided(msg *messages.AssistantMessage) retry.Class {
	ch := &c.r.Chain
	ch.Generation = c.r.Generation
	ch.Token++ // a turn ended: any reply or timer still in flight is stale
	c.dropHold()
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
		if ch.Attempt > 0 {
			if ch.FallbackApplied {
				c.emitFallback(EventFallbackSucceeded, retry.FallbackEvent{To: ch.FallbackModel, Role: ch.FallbackRole})
			}
			c.endChain(true, ch.Attempt, "")
		}
	case class.Retryable():
		c.retryable(msg, class, &rd)
	default:
		if ch.Attempt > 0 {
			c.endChain(false, ch.Attempt, retry.FinalError(msg))
		}
	}
	return class
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
		if ch.Attempt > 0 {
			c.endChain(false, ch.Attempt, retry.FinalError(msg))
		}
		return
	}
	if ch.Attempt < maxAttempt {
		ch.Attempt++ // the chain is open
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
		c.become(AwaitingCredential)
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
// session's key, blocked for its cooldown; a provider without credentials has
// no actor to ask (decide answers for it).
func (c *Core) askCredentialSwitch(cooldown time.Duration) {
	if !c.credentialed[provider(c.r.Model)] {
		return
	}
	ask := c.add(AskCredentialSwitch)
	ask.Model, ask.Cooldown, ask.Token = c.r.Model, cooldown, c.r.Chain.Token
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
		c.become(AwaitingFallback)
		pin := ch.Class == retry.ClassifierRefusal
		cooldown := ch.Cooldown
		if pin {
			cooldown = 0
		}
		ask := c.add(AskFallback)
		ask.Model, ask.Primary, ask.Role = c.r.Model, c.r.Primary, c.r.Role
		ask.Cooldown, ask.Pin, ask.Token = cooldown, pin, ch.Token
		return
	}
	if ch.Class == retry.ClassifierRefusal {
		c.endRefusal()
		return
	}
	c.decideDelay()
}

// fallbackReplied takes the model-fallback actor's answer: a switch
// applies the fallback model, pinned after a classifier refusal (as
// askFallback asked).
func (c *Core) fallbackReplied(in Input) {
	ch := &c.r.Chain
	if !in.Switched {
		if ch.Class == retry.ClassifierRefusal {
			c.endRefusal()
			return
		}
		c.waitForCooling(in.Back)
		c.decideDelay()
		return
	}
	ch.Switched = true
	ch.Delay = 0
	ch.FallbackApplied = true
	ch.FallbackModel, ch.FallbackRole = in.To, in.Role
	before := c.modelState()
	c.r.Pinned = ch.Class == retry.ClassifierRefusal
	c.switchModel(in.To, "fallback")
	c.r.Before = before
	c.emitFallback(EventFallbackApplied, retry.FallbackEvent{From: in.From, To: in.To, Role: in.Role})
	c.decideDelay()
}

// decideDelay runs steps 9-12: the max-delay fail-fast, then start and
// back off.
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
		c.become(AwaitingBudget)
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
	if c.r.Chain.HeldToken != 0 || c.r.State == AwaitingBudget {
		c.r.Chain.HeldToken = 0
		c.add(DropBudgetHold).Model = c.r.Model
	}
}

// budgetReleased moves a held retry's backoff to end at at (the budget
// recovered before the retry's slot), and says so (retry_released).
func (c *Core) budgetReleased(at time.Time) {
	ch := &c.r.Chain
	ch.HeldToken = 0
	c.add(CancelTimer).Token = ch.Token
	ch.Token++
	left := max(at.Sub(c.now), 0)
	ev := c.emit(EventRetryReleased)
	ev.Attempt, ev.Delay = ch.Attempt, left
	c.backOff(left)
}

// startRetry runs steps 11-12: auto_retry_start, then the backoff for
// d. The event's delay counts from the decision, extra of it added by the
// budget.
func (c *Core) startRetry(extra, d time.Duration) {
	ch := &c.r.Chain
	ch.Started = true
	ch.Delay += extra
	start := c.out.starts.add()
	*start = retry.StartEvent{Attempt: ch.Attempt, MaxAttempts: c.settings.MaxRetries, Delay: ch.Delay,
		ErrorMessage: ch.ErrText, Class: ch.Class, BudgetDelay: extra}
	c.emit(EventAutoRetryStart).Start = start
	c.add(StripTrailingError)
	ch.Token++
	c.backOff(d)
}

// backOff starts the chain's backoff for d, its timer the chain's token.
func (c *Core) backOff(d time.Duration) {
	c.become(Backoff)
	c.r.SleepUntil = c.now.Add(d)
	c.armTimer(d)
}

// lastStarted is the attempt of the open chain's last auto_retry_start:
// the chain's attempt, less the one being decided while it asks.
func (c *Core) lastStarted() int {
	if c.r.State.asking() {
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
	switch {
	case c.r.Chain.Attempt == 0:
		return
	case c.r.State == Backoff:
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
	ch.Attempt = 0
	ch.Started = false
	ch.FallbackApplied = false
	ch.FallbackModel, ch.FallbackRole = "", ""
	ch.ErrText = ""
	ch.Token++
}
