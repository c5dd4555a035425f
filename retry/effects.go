package retry

import (
	"time"

	"github.com/musepi/musepi/messages"
)

// InputKind says what happened.
type InputKind uint8

// The inputs a Chain takes.
const (
	// InputTurnEnded: a turn ended (agent_end) with Message. Needs Now,
	// Settings, Message, Aborts and Generation.
	InputTurnEnded InputKind = iota + 1
	// InputCredentialReply answers AskCredentialSwitch: Switched, and RetryAt,
	// when the earliest temporarily blocked sibling credential frees up (zero:
	// none). Needs Now and Token.
	InputCredentialReply
	// InputFallbackReply answers AskModelFallback: Switched, From, To, Role.
	// Needs Token.
	InputFallbackReply
	// InputSleepDone: the backoff sleep of Token finished.
	InputSleepDone
	// InputAbortRetry: the user cancelled the retry (abort_retry, Esc).
	InputAbortRetry
	// InputAbort: the global abort; cancels the retry, then the stream.
	InputAbort
	// InputBudgetGrant answers AskBudget: the retry may go out At. Needs
	// Now and Token.
	InputBudgetGrant
	// InputBudgetRelease: the budget recovered and lets the held retry of
	// Token go out At, earlier than granted. Needs Now.
	InputBudgetRelease
)

// Input is one thing that happened to a chain. Only the fields its Kind
// names are read.
type Input struct {
	Kind       InputKind
	Now        time.Time
	Settings   Settings
	Message    *messages.AssistantMessage
	Aborts     AbortState
	Generation uint64
	Token      uint64
	Switched   bool
	RetryAt    time.Time
	From       string
	To         string
	Role       string
	At         time.Time
}

// TurnEnded is the input for a turn that ended with msg.
func TurnEnded(now time.Time, s Settings, msg *messages.AssistantMessage, aborts AbortState, generation uint64) Input {
	return Input{Kind: InputTurnEnded, Now: now, Settings: s, Message: msg, Aborts: aborts, Generation: generation}
}

// EffectKind says what the caller must do.
type EffectKind uint8

// The effects a Chain returns.
const (
	// OpenLifecycle: the retry lifecycle opens; Prompt now waits on it.
	OpenLifecycle EffectKind = iota + 1
	// CloseLifecycle: the chain ended; release whoever waits on it.
	CloseLifecycle
	// EmitStart: emit auto_retry_start with Start.
	EmitStart
	// EmitEnd: emit auto_retry_end with End.
	EmitEnd
	// EmitFallbackApplied: switch the session to Fallback.To, append a
	// model_change entry, emit retry_fallback_applied.
	EmitFallbackApplied
	// EmitFallbackSucceeded: emit retry_fallback_succeeded for Fallback.To.
	EmitFallbackSucceeded
	// ResetProviderSession: drop the provider's cached session (stale replay).
	ResetProviderSession
	// AskCredentialSwitch: mark the current credential limited for BlockFor
	// and ask for another; answer with InputCredentialReply and Token.
	AskCredentialSwitch
	// AskModelFallback: put the current model selector in cooldown for
	// BlockFor (unless Pin) and ask for the next fallback model; a switch
	// made with Pin is never reverted. Answer with InputFallbackReply and Token.
	AskModelFallback
	// StripTrailingError: remove the trailing assistant error from the
	// runtime context; it stays in the persisted history.
	StripTrailingError
	// Sleep: start the backoff timer for Delay; when it fires, send
	// InputSleepDone with Token.
	Sleep
	// CancelSleep: stop the backoff timer of Token.
	CancelSleep
	// ScheduleContinue: schedule `continue` through the post-prompt scheduler
	// after Delay (1 ms), tagged with Generation.
	ScheduleContinue
	// RouteToCompaction: context overflow; hand the turn to the compaction hook.
	RouteToCompaction
	// AbortStream: abort the active LLM stream (after the retry was cancelled).
	AbortStream
	// ReportOutcome: tell the provider's retry budget that a request
	// succeeded (Success) or failed retryably.
	ReportOutcome
	// AskBudget: ask the provider's retry budget when the retry due at Due
	// may go out (never after Latest, when set); answer with
	// InputBudgetGrant and Token. A later InputBudgetRelease with the same
	// Token may move it earlier.
	AskBudget
	// DropBudgetHold: the retry the budget holds for this session will not
	// go out (cancelled, or its turn ended); forget it.
	DropBudgetHold
)

var effectNames = [...]string{
	OpenLifecycle:         "open_lifecycle",
	CloseLifecycle:        "close_lifecycle",
	EmitStart:             "auto_retry_start",
	EmitEnd:               "auto_retry_end",
	EmitFallbackApplied:   "retry_fallback_applied",
	EmitFallbackSucceeded: "retry_fallback_succeeded",
	ResetProviderSession:  "reset_provider_session",
	AskCredentialSwitch:   "ask_credential_switch",
	AskModelFallback:      "ask_model_fallback",
	StripTrailingError:    "strip_trailing_error",
	Sleep:                 "sleep",
	CancelSleep:           "cancel_sleep",
	ScheduleContinue:      "schedule_continue",
	RouteToCompaction:     "route_to_compaction",
	AbortStream:           "abort_stream",
	ReportOutcome:         "report_outcome",
	AskBudget:             "ask_budget",
	DropBudgetHold:        "drop_budget_hold",
}

func (k EffectKind) String() string {
	if int(k) < len(effectNames) && effectNames[k] != "" {
		return effectNames[k]
	}
	return "unknown"
}

// Effect is one thing the caller must do. Only the fields its Kind names are set.
type Effect struct {
	Kind       EffectKind
	Start      StartEvent
	End        EndEvent
	Fallback   FallbackEvent
	Delay      time.Duration
	Token      uint64
	Generation uint64
	BlockFor   time.Duration
	Pin        bool
	Success    bool
	Due        time.Time
	Latest     time.Time
}

// StartEvent is the content of auto_retry_start.
type StartEvent struct {
	Attempt      int // 1-based
	MaxAttempts  int
	Delay        time.Duration
	ErrorMessage string
	Class        Class
	BudgetDelay  time.Duration // the part of Delay the retry budget added
}

// EndEvent is the content of auto_retry_end.
type EndEvent struct {
	Success    bool
	Attempt    int
	FinalError string // empty on success
	Class      Class  // of the failure the chain was retrying
}

// FallbackEvent is the content of retry_fallback_applied / _succeeded.
type FallbackEvent struct {
	From string // "provider/model"
	To   string
	Role string
}
