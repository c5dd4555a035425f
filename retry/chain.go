package retry

import (
	"fmt"
	"time"

	"github.com/musepi/musepi/messages"
)

// Source is the random source a Chain draws jitter from: uniform numbers in
// [0, 1). *math/rand/v2.Rand satisfies it; seed it for reproducible runs.
type Source interface {
	Float64() float64
}

// Phase is where a chain stands.
type Phase uint8

// The phases of a chain. Every phase but Idle means the retry lifecycle is open.
const (
	Idle               Phase = iota // no chain open
	AwaitingCredential              // asked the credential actor to switch
	AwaitingFallback                // asked the model-fallback actor to switch
	AwaitingBudget                  // asked the provider's retry budget when the retry may go
	Sleeping                        // the backoff sleep is running
	AwaitingTurn                    // continue scheduled; waiting for the turn to end
)

var phaseNames = [...]string{"idle", "awaiting_credential", "awaiting_fallback", "awaiting_budget", "sleeping", "awaiting_turn"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "unknown"
}

// Chain is the retry state of one session (attempt, lifecycle, pending
// decision) as a pure state machine: Step takes an Input and returns the
// Effects the caller must execute, in order. A Chain is not safe for
// concurrent use; an actor owns it.
type Chain struct {
	src      Source
	settings Settings
	// noFallbackChain: the session's role has no fallback chain, so model
	// fallback has nothing to switch to (NoFallbackChain).
	noFallbackChain bool

	phase      Phase
	attempt    int
	started    bool   // auto_retry_start emitted in this chain
	token      uint64 // ties replies and timer firings to the request they answer
	generation uint64 // prompt generation of the failing turn
	now        time.Time

	heldToken uint64    // the budget ask whose release may still move the sleep; 0: none
	askedAt   time.Time // when the budget was asked

	// The attempt being decided.
	class    Class
	errText  string
	delay    time.Duration
	wait     time.Duration // usage limit: hint or reason estimate
	cooldown time.Duration // model selector cooldown
	switched bool

	fallbackApplied bool // a model fallback was applied in this chain
	fallbackModel   string
	fallbackRole    string

	out     []Effect // the effects of the Step running
	stepBuf []Effect // Step's reused buffer
}

// NewChain returns an idle chain drawing jitter from src.
func NewChain(src Source) *Chain {
	c := MakeChain(src)
	return &c
}

// MakeChain is NewChain as a value, for an owner that embeds its chain.
func MakeChain(src Source) Chain { return Chain{src: src, settings: DefaultSettings()} }

// Settings are the settings the chain decides by: those of the last
// TurnEnded input (before any, DefaultSettings or what SetSettings set).
func (c *Chain) Settings() Settings { return c.settings }

// SetSettings sets the settings the chain decides by until the next
// TurnEnded input brings its own.
func (c *Chain) SetSettings(s Settings) { c.settings = s }

// NoFallbackChain tells the chain that the session's role has no fallback
// chain (known when the session is configured): with model fallback on,
// it decides as if the model-fallback actor had answered that there is no
// model to switch to, without asking it.
func (c *Chain) NoFallbackChain() { c.noFallbackChain = true }

// Phase reports where the chain stands.
func (c *Chain) Phase() Phase { return c.phase }

// IsRetrying reports whether the retry lifecycle is open.
func (c *Chain) IsRetrying() bool { return c.phase != Idle }

// Attempt is the current attempt number, 0 when idle.
func (c *Chain) Attempt() int { return c.attempt }

// Generation is the prompt generation of the chain's failing turn.
func (c *Chain) Generation() uint64 { return c.generation }

// Step feeds one input to the chain and returns the effects to execute, in
// order. The returned slice is reused by the next Step. Replies and timer
// firings whose Token is not the one the chain waits for are ignored.
func (c *Chain) Step(in Input) []Effect {
	c.stepBuf = c.AppendStep(c.stepBuf[:0], in)
	return c.stepBuf
}

// AppendStep is Step appending the effects to out, so that the chain keeps
// no buffer between steps: an owner of many idle chains shares one.
func (c *Chain) AppendStep(out []Effect, in Input) []Effect {
	c.out = out
	defer func() { c.out = nil }()
	c.now = in.Now
	switch in.Kind {
	case InputTurnEnded:
		c.turnEnded(in)
	case InputCredentialReply:
		if c.phase == AwaitingCredential && in.Token == c.token {
			c.credentialReplied(in)
		}
	case InputFallbackReply:
		if c.phase == AwaitingFallback && in.Token == c.token {
			c.fallbackReplied(in)
		}
	case InputBudgetGrant:
		if c.phase == AwaitingBudget && in.Token == c.token {
			c.budgetGranted(in.At)
		}
	case InputBudgetRelease:
		if c.phase == Sleeping && c.heldToken != 0 && in.Token == c.heldToken {
			c.budgetReleased(in.At)
		}
	case InputSleepDone:
		if c.phase == Sleeping && in.Token == c.token {
			c.heldToken = 0 // the held retry goes out now: nothing left to drop
			c.phase = AwaitingTurn
			c.emit(Effect{Kind: ScheduleContinue, Delay: time.Millisecond, Generation: c.generation})
		}
	case InputAbortRetry:
		c.abortRetry()
	case InputAbort:
		c.abortRetry()
		c.emit(Effect{Kind: AbortStream})
	}
	return c.out
}

func (c *Chain) turnEnded(in Input) {
	c.settings = in.Settings
	c.generation = in.Generation
	if c.phase == Sleeping {
		c.emit(Effect{Kind: CancelSleep, Token: c.token})
	}
	c.token++ // a turn ended: any reply or timer still in flight is stale
	c.dropHold()
	if c.phase != Idle {
		c.phase = AwaitingTurn
	}
	var text reading // the error text, read once for the whole decision
	class := classify(in.Message, in.Aborts, &text)
	if class.Retryable() && in.Aborts.any() {
		// A deliberate abort (user, dispose, edit guard) settles the turn,
		// whatever error the stream ended with while it was being aborted.
		class = NotRetryable
	}
	if c.settings.Budget.Enabled && c.settings.Enabled {
		switch {
		case class == Success:
			c.emit(Effect{Kind: ReportOutcome, Success: true})
		case class.LoadsProvider():
			c.emit(Effect{Kind: ReportOutcome})
		}
	}
	switch {
	case class == Success:
		if c.phase != Idle {
			if c.fallbackApplied {
				c.emit(Effect{Kind: EmitFallbackSucceeded, Fallback: FallbackEvent{To: c.fallbackModel, Role: c.fallbackRole}})
			}
			c.end(true, c.attempt, "")
		}
	case class.Retryable():
		c.handleRetryable(in, class, &text)
	default:
		if c.phase != Idle {
			c.end(false, c.attempt, FinalError(in.Message))
		}
		if class == ContextOverflow {
			c.emit(Effect{Kind: RouteToCompaction})
		}
	}
}

// handleRetryable runs steps 1-8 of the flow; it continues in
// credentialReplied, fallbackReplied and decide.
func (c *Chain) handleRetryable(in Input, class Class, text *reading) {
	s := &c.settings
	msg := in.Message
	if !s.Enabled {
		if c.phase != Idle {
			c.end(false, c.attempt, FinalError(msg))
		}
		return
	}
	if c.attempt < maxAttempt {
		c.attempt++
	}
	if c.phase == Idle {
		c.phase = AwaitingTurn
		c.emit(Effect{Kind: OpenLifecycle})
	}
	c.class = class
	c.errText = FinalError(msg)
	if c.attempt > s.MaxRetries {
		c.end(false, c.attempt-1, c.errText)
		return
	}
	c.switched = false
	c.delay = Backoff(c.attempt, s.BaseDelay, c.src.Float64())
	hint, hasHint := parseHint(msg.GetHeaders(), c.errText, in.Now, text)
	_, estimate := limitWait(text.of(c.errText), int(msg.GetHttpStatus()), c.src.Float64())
	c.cooldown = estimate
	if hasHint {
		c.cooldown = hint.Delay
	}
	switch class {
	case StaleReplay:
		c.emit(Effect{Kind: ResetProviderSession})
		c.delay = 0
	case UsageLimit:
		c.wait = c.cooldown
		c.phase = AwaitingCredential
		c.emit(Effect{Kind: AskCredentialSwitch, Token: c.token, BlockFor: c.wait})
		return
	default:
		if hasHint {
			c.delay = max(c.delay, hint.Delay)
		}
	}
	c.askFallback()
}

func (c *Chain) credentialReplied(in Input) {
	if in.Switched {
		c.switched = true
		c.delay = 0
	} else {
		wait := c.wait
		if !in.RetryAt.IsZero() {
			wait = min(wait, in.RetryAt.Add(time.Second).Sub(in.Now))
		}
		c.delay = max(c.delay, wait)
	}
	c.askFallback()
}

// askFallback is step 8: without a credential switch, ask for the next model.
func (c *Chain) askFallback() {
	if !c.switched && c.settings.ModelFallback && !c.noFallbackChain && c.class.AllowsModelFallback() {
		c.phase = AwaitingFallback
		pin := c.class == ClassifierRefusal
		cooldown := c.cooldown
		if pin {
			cooldown = 0
		}
		c.emit(Effect{Kind: AskModelFallback, Token: c.token, BlockFor: cooldown, Pin: pin})
		return
	}
	if c.class == ClassifierRefusal {
		c.endRefusal()
		return
	}
	c.decide()
}

func (c *Chain) fallbackReplied(in Input) {
	if !in.Switched {
		if c.class == ClassifierRefusal {
			c.endRefusal()
			return
		}
		c.decide()
		return
	}
	c.switched = true
	c.delay = 0
	c.fallbackApplied = true
	c.fallbackModel, c.fallbackRole = in.To, in.Role
	c.emit(Effect{Kind: EmitFallbackApplied, Fallback: FallbackEvent{From: in.From, To: in.To, Role: in.Role}})
	c.decide()
}

// decide runs steps 9-12: the max-delay fail-fast, then start and sleep.
func (c *Chain) decide() {
	s := &c.settings
	if !c.switched && s.MaxDelay > 0 && c.delay > s.MaxDelay {
		c.end(false, c.attempt, fmt.Sprintf("provider asked for %d ms, more than retry.maxDelayMs (%d ms): %s",
			c.delay.Milliseconds(), s.MaxDelay.Milliseconds(), c.errText))
		return
	}
	if s.Budget.Enabled && !c.switched && c.class != StaleReplay {
		// Step 10a (beyond the reference policy): the provider's retry
		// budget may hold the retry back; a switched retry is a first
		// attempt on another credential or model and is not held, nor is
		// a stale replay, which is not the provider failing under load.
		c.phase = AwaitingBudget
		var latest time.Time
		if s.MaxDelay > 0 {
			latest = c.now.Add(s.MaxDelay)
		}
		c.askedAt = c.now
		c.emit(Effect{Kind: AskBudget, Token: c.token, Due: c.now.Add(c.delay), Latest: latest})
		return
	}
	c.start(0, c.delay)
}

// budgetGranted takes the budget's answer: the retry goes out at at.
func (c *Chain) budgetGranted(at time.Time) {
	due := c.askedAt.Add(c.delay)
	if at.Before(due) {
		at = due // never before the backoff
	}
	extra := at.Sub(due)
	if extra > 0 {
		c.heldToken = c.token
	}
	c.start(extra, max(at.Sub(c.now), 0))
}

// dropHold tells the budget that a held retry (or one it is being asked
// about, which it may hold) will not go out after all, so that a release is
// not spent on it.
func (c *Chain) dropHold() {
	if c.heldToken != 0 || c.phase == AwaitingBudget {
		c.heldToken = 0
		c.emit(Effect{Kind: DropBudgetHold})
	}
}

// budgetReleased moves a held retry's sleep to end at at (the budget
// recovered before the retry's slot).
func (c *Chain) budgetReleased(at time.Time) {
	c.heldToken = 0
	c.emit(Effect{Kind: CancelSleep, Token: c.token})
	c.token++
	c.emit(Effect{Kind: Sleep, Delay: max(at.Sub(c.now), 0), Token: c.token})
}

// start runs steps 11-12: auto_retry_start, then the backoff sleep for
// sleep. The event's delay counts from the decision, extra of it added by
// the budget.
func (c *Chain) start(extra, sleep time.Duration) {
	c.started = true
	c.delay += extra
	c.emit(Effect{Kind: EmitStart, Start: StartEvent{
		Attempt: c.attempt, MaxAttempts: c.settings.MaxRetries, Delay: c.delay, ErrorMessage: c.errText, Class: c.class,
		BudgetDelay: extra,
	}})
	c.emit(Effect{Kind: StripTrailingError})
	c.token++
	c.phase = Sleeping
	c.emit(Effect{Kind: Sleep, Delay: sleep, Token: c.token})
}

// endRefusal ends a chain whose classifier refusal found no fallback model:
// silently if no attempt of this chain was started, else reporting the last
// started attempt.
func (c *Chain) endRefusal() {
	if !c.started {
		c.emit(Effect{Kind: CloseLifecycle})
		c.reset()
		return
	}
	c.end(false, c.attempt-1, c.errText)
}

func (c *Chain) abortRetry() {
	switch c.phase {
	case Idle:
		return
	case Sleeping:
		c.emit(Effect{Kind: CancelSleep, Token: c.token})
	}
	c.dropHold()
	c.end(false, c.attempt, RetryCancelled)
}

// end emits auto_retry_end, closes the lifecycle and resets the counter.
func (c *Chain) end(success bool, attempt int, finalError string) {
	c.emit(Effect{Kind: EmitEnd, End: EndEvent{Success: success, Attempt: attempt, FinalError: finalError, Class: c.class}})
	c.emit(Effect{Kind: CloseLifecycle})
	c.reset()
}

func (c *Chain) reset() {
	c.phase = Idle
	c.attempt = 0
	c.started = false
	c.fallbackApplied = false
	c.fallbackModel, c.fallbackRole = "", ""
	c.errText = ""
	c.token++
}

func (c *Chain) emit(e Effect) { c.out = append(c.out, e) }

// maxAttempt bounds the counter so it never overflows.
const maxAttempt = 1<<31 - 1

// RetryCancelled is the final error of a chain cancelled by AbortRetry or Abort.
const RetryCancelled = "Retry cancelled"

// FinalError is the error text a chain reports for msg: its error message,
// or its stop reason when it has none.
func FinalError(msg *messages.AssistantMessage) string {
	if e := msg.GetErrorMessage(); e != "" {
		return e
	}
	return "turn ended with stop reason " + msg.GetStopReason().String()
}
