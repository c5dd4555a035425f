package session

import (
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// EffectKind says what the owner of a Core must do.
type EffectKind uint8

// The effects a Core returns. Each names the Effect fields it sets.
const (
	// Emit publishes Event to the session's subscribers.
	Emit EffectKind = iota + 1
	// AppendModelChange persists Change (history only, never sent to a
	// model). The conversation itself (prompts, messages, tool results) is
	// written to the history by the owner as it arrives, before the core
	// is told.
	AppendModelChange
	// StripTrailingError removes the trailing assistant error from the
	// context; it stays in the history.
	StripTrailingError
	// ReplaceContext sets the context to Context (after compaction).
	ReplaceContext
	// SelectCredential asks the credentials actor of Model's provider which
	// credential the next turn uses; answer with InCredentialSelected. On a
	// retry's continue, Credential is the key the chain's last attempt used,
	// which InBackoffDone did not report free. (A provider without
	// credentials, and a continue whose key is free, start the turn
	// without asking.) With Pace, the turn also reserves its need from the
	// key's rate limits, as reservation Token; the answer may be a wait,
	// then a grant, both InCredentialSelected with Token. Fallbacks are
	// the models an overload limiter may seat the turn on at once when
	// Model's limit is full (the answer names the one taken).
	SelectCredential
	// SettleReservation ends reservation Token (0: none) of the turn that
	// ended on Model with Credential in Message: what it used goes to the
	// budget, with the limits its response announced, Limits, when they
	// did not reach it as the headers arrived (ObserveRateLimits).
	SettleReservation
	// ObserveRateLimits tells the pacer of Model's provider the limits
	// Limits that the response of the turn running on Credential
	// announced, its headers arriving At: they set the key's budget, and
	// end its cold start.
	ObserveRateLimits
	// CancelReservation drops reservation Token on Model's provider: a
	// pacing wait ended by an abort, or a grant no turn takes.
	CancelReservation
	// StartTurn streams turn Turn on Model with Credential; its deltas and
	// end come back as InTurnDelta and InTurnEnded.
	StartTurn
	// CancelTurn cancels the running turn or tools.
	CancelTurn
	// RunTools runs Calls of turn Turn; answer with InToolsDone.
	RunTools
	// DeliverSteering adds the steering messages waiting for the running
	// prompt to the conversation: after a turn's tool results, before the
	// next turn.
	DeliverSteering
	// Compact runs the compaction hook on Message, the turn that overflowed
	// (nil: a compaction asked for between prompts, whose caller, InCompact's,
	// ReplyCompaction answers); answer with InCompactionDone.
	Compact
	// ArmTimer starts the backoff timer Token for Delay; the retry's
	// continue of Generation follows ContinueDelay after it (spec 3 step 13:
	// 1 ms) and comes back as InBackoffDone. With Passivate the session
	// waits without its actors: the timer wakes it by its id.
	ArmTimer
	// CancelTimer stops the backoff timer Token.
	CancelTimer
	// ResetProviderSession drops Model's provider's cached state for the session.
	ResetProviderSession
	// AskCredentialSwitch blocks the credential in use on Model's provider
	// for Cooldown and asks for another; answer with
	// InCredentialReply and Token.
	AskCredentialSwitch
	// AskFallback puts Model in cooldown for Cooldown (unless Pin) and asks
	// the fallback actor of Role for the next model after Model (Primary
	// being the session's primary); answer with InFallbackReply and Token.
	AskFallback
	// AskBudget asks Model's provider's retry budget when the retry due at
	// Due may go out (never after Latest, when set); answer with
	// InBudgetGrant and Token.
	AskBudget
	// ReportOutcome tells Model's provider's retry budget that a request
	// succeeded (Success) or failed retryably.
	ReportOutcome
	// DropBudgetHold tells Model's provider's retry budget to forget the
	// retry it holds for the session.
	DropBudgetHold
	// ReleaseSession tells Model's provider's credentials actor and budget
	// that the session is gone.
	ReleaseSession
	// Settle answers the prompt with Result; the session is idle again.
	Settle
	// RejectPrompt answers a prompt that came while another runs with
	// Result (ErrorKind busy); the running prompt goes on.
	RejectPrompt
	// RejectCompaction answers an InCompact that cannot be done with Error.
	RejectCompaction
	// ReplyCompaction answers the caller of a compaction between prompts:
	// Error, or the context becomes Context (ReplaceContext follows).
	ReplyCompaction
	// AttachCaller makes InAttach's caller the one that waits for the
	// prompt of Generation; a caller attached before is told that another
	// attached.
	AttachCaller
	// ReplyAttach answers InAttach's caller with Result at once.
	ReplyAttach
	// AcceptHandOver keeps InHandOver's caller: HandOver, or
	// ReplyHandOver, answers it.
	AcceptHandOver
	// RefuseHandOver answers InHandOver's caller with Error.
	RefuseHandOver
	// ReplyHandOver answers the hand-over's caller (AcceptHandOver's):
	// done, or Error, and the session stays.
	ReplyHandOver
	// HandOver writes the session's record (in a backoff), then leaves as
	// Leave does and answers the hand-over's caller; a record that cannot
	// be written is InHandOverFailed.
	HandOver
	// Leave stops the session's actors without ending its chain, which
	// goes on where the session is opened next; Result (nil: none runs)
	// answers the prompt's caller.
	Leave
	// Passivate gives the session's state to its root for its next actor
	// and stops its actors (messages held meanwhile keep them: InWake).
	Passivate
	// CancelPassivation delivers the messages held for a passivation that
	// does not happen (the session no longer waits out that backoff).
	CancelPassivation
)

var effectNames = [...]string{
	Emit: "emit", AppendModelChange: "append-model-change",
	StripTrailingError: "strip-trailing-error", ReplaceContext: "replace-context",
	SelectCredential: "select-credential", SettleReservation: "settle-reservation", ObserveRateLimits: "observe-rate-limits",
	CancelReservation: "cancel-reservation", StartTurn: "start-turn", CancelTurn: "cancel-turn",
	RunTools: "run-tools", DeliverSteering: "deliver-steering", Compact: "compact", ArmTimer: "arm-timer", CancelTimer: "cancel-timer",
	ResetProviderSession: "reset-provider-session",
	AskCredentialSwitch:  "ask-credential-switch", AskFallback: "ask-fallback", AskBudget: "ask-budget",
	ReportOutcome: "report-outcome", DropBudgetHold: "drop-budget-hold", ReleaseSession: "release-session",
	Settle: "settle", RejectPrompt: "reject-prompt",
	RejectCompaction: "reject-compaction", ReplyCompaction: "reply-compaction",
	AttachCaller: "attach-caller", ReplyAttach: "reply-attach",
	AcceptHandOver: "accept-hand-over", RefuseHandOver: "refuse-hand-over", ReplyHandOver: "reply-hand-over",
	HandOver: "hand-over", Leave: "leave", Passivate: "passivate", CancelPassivation: "cancel-passivation",
}

func (k EffectKind) String() string {
	if int(k) < len(effectNames) && effectNames[k] != "" {
		return effectNames[k]
	}
	return "unknown"
}

// Effect is one thing the owner of a Core must do. Only the fields its
// Kind names are set. Its larger payloads (Event, Change, Result) live in
// the Effects that holds it, and are valid until that is Reset.
type Effect struct {
	Kind          EffectKind
	Pace          bool
	Pin           bool
	Passivate     bool
	Success       bool
	Turn          uint64
	Token         uint64
	Generation    uint64
	Delay         time.Duration
	ContinueDelay time.Duration
	Cooldown      time.Duration // of a key or model (AskCredentialSwitch, AskFallback)
	Model         string
	Credential    string
	Primary       string
	Role          string
	Due           time.Time
	Latest        time.Time
	At            time.Time // ObserveRateLimits: when the headers arrived
	Error         string    // RejectCompaction, ReplyCompaction, RefuseHandOver, ReplyHandOver
	Calls         []*messages.ToolCall
	Fallbacks     []string // SelectCredential: the role's fallback chain (read only, shared)
	Context       []*messages.Entry
	Message       *messages.AssistantMessage // Compact: the failed turn's; SettleReservation: the ended turn's
	Limits        *messages.RateLimits       // ObserveRateLimits, SettleReservation
	Event         *Event
	Change        *ModelChange
	Result        *Result
}

// Effects holds the effects of a Core's steps, in order, and the payloads
// they point to. Its owner passes it to Step, carries out the effects in
// List, and Resets it before the next step; its storage is reused, so once
// it has grown a step allocates nothing for its effects.
type Effects struct {
	list      slab[Effect]
	events    slab[Event]
	starts    slab[retry.StartEvent]
	ends      slab[retry.EndEvent]
	fallbacks slab[retry.FallbackEvent]
	switches  slab[CredentialSwitch]
	waits     slab[RateLimitWait]
	capacity  slab[CapacityWait]
	changes   slab[ModelChange]
	results   slab[Result]
}

// List returns the effects added since the last Reset, in order (capped:
// appending to it copies).
func (o *Effects) List() []Effect { return o.list[:len(o.list):len(o.list)] }

// Reset empties o for the next step; it clears only what the effects
// since the last Reset used, dropping what they point to.
func (o *Effects) Reset() {
	o.list.reset()
	o.events.reset()
	o.starts.reset()
	o.ends.reset()
	o.fallbacks.reset()
	o.switches.reset()
	o.waits.reset()
	o.capacity.reset()
	o.changes.reset()
	o.results.reset()
}

// slab is reusable storage for values of T: the values past its length
// are zero (reset clears what was used), so add hands out a value to fill
// in place without clearing or copying it.
type slab[T any] []T

// add appends a zero value and returns it. A slab that grows moves on to
// new storage; the values it handed out before stay where they are, kept
// by whoever points to them.
func (s *slab[T]) add() *T {
	n := len(*s)
	if n == cap(*s) {
		var zero T
		*s = append(*s, zero)
	} else {
		*s = (*s)[:n+1]
	}
	return &(*s)[n]
}

// insert adds a zero value at index i, moving the values from i on up
// one, and returns it.
func (s *slab[T]) insert(i int) *T {
	s.add()
	copy((*s)[i+1:], (*s)[i:len(*s)-1])
	var zero T
	(*s)[i] = zero
	return &(*s)[i]
}

func (s *slab[T]) reset() {
	clear(*s)
	*s = (*s)[:0]
}

// ModelChange is a switch of the session's model, with what a resumed
// session needs to stand where this one stood after it.
type ModelChange struct {
	From, To, Role string
	Reason         string    // "fallback", "revert" or "user"
	Pinned         bool      // To is a pinned fallback (never reverted)
	PrimaryUntil   time.Time // when a fallback may revert to the primary
}

// CredentialSwitch is a move to another credential of the model's
// provider: names, never keys.
type CredentialSwitch struct {
	Model    string // "provider/model" in use
	From, To string
	Reason   string // SwitchUsageLimit, SwitchRedeemed or SwitchPacing
}

// Why a session moved to another credential.
const (
	SwitchUsageLimit = "usage_limit"          // its key hit a usage limit
	SwitchRedeemed   = "usage_limit_redeemed" // ... and the switch spent a banked reset
	SwitchPacing     = "pacing"               // its key had no room for the turn; this one had the most
)

// ErrorKind says how a prompt ended without an answer.
type ErrorKind string

// The ways a prompt ends without an answer.
const (
	KindFailed          ErrorKind = "failed"
	KindBusy            ErrorKind = "busy"
	KindAborted         ErrorKind = "aborted"
	KindContextOverflow ErrorKind = "context_overflow"
	KindRetryCancelled  ErrorKind = "retry_cancelled"
	KindShutdown        ErrorKind = "shutdown"
	KindHistory         ErrorKind = "history" // the prompt's history could not be written
	// KindNoPrompt: an AttachPrompt found no prompt of its generation (none
	// runs and none settled with nobody attached).
	KindNoPrompt ErrorKind = "no_prompt"
	// KindHandedOver: the session was handed over with the prompt still
	// running: it goes on where the session is opened next.
	KindHandedOver ErrorKind = "handed_over"
)

// HandedOverError is the error of a prompt whose session was handed over
// (or taken by another activation) while it ran.
const HandedOverError = "the session was handed over with this prompt running; it goes on where the session is opened next (attach there)"

// Result is how a prompt ended: its last message, and for a prompt
// without an answer the kind and text of the error.
type Result struct {
	Generation uint64
	Message    *messages.AssistantMessage
	ErrorKind  ErrorKind
	Error      string
	// Retry is how the prompt's last retry chain ended, when it ended
	// without success (nil otherwise).
	Retry *retry.EndEvent
}

// ShutdownError is the final error of a retry chain or prompt cut short by
// the session stopping.
const ShutdownError = "session shut down before the prompt settled"
