package session

import (
	"time"

	"github.com/musepi/musepi/messages"
)

// InputKind says what happened to a session.
type InputKind uint8

// The inputs a Core takes. Each names the Input fields it reads.
const (
	// InPrompt: a new user prompt, which the owner wrote to the history
	// if the session was idle (Err: the write that failed; the prompt then
	// ends at once with it).
	InPrompt InputKind = iota + 1
	// InCredentialSelected: the credentials actor chose Credential for the
	// turn about to start ("" for a provider without credentials). With a
	// Token, it answers a paced SelectCredential: Wait above 0 says the
	// turn waits (for Limit) until a grant (Wait 0) comes; Switched says
	// the key held had no room. Queued above 0 says the turn waits for a
	// place in its model's concurrency limit, Queued turns waiting with it
	// (see overload.go), until a grant; Model, that the turn was seated
	// on that fallback at once instead.
	InCredentialSelected
	// InTurnDelta: the running turn Turn streamed Delta of DeltaKind.
	InTurnDelta
	// InRateLimits: the response of the running turn Turn announced
	// Limits for its key, its headers arriving At (before its answer
	// streams).
	InRateLimits
	// InTurnEnded: turn Turn ended with Message, which the owner wrote to
	// the history
	// (Err: the write that failed; nothing more of the prompt is tried).
	// Limits: the rate limits its response announced, taken off Message
	// (they are no part of the conversation), when they did not come as
	// InRateLimits as its headers arrived.
	InTurnEnded
	// InToolsDone: the tools of turn Turn ran; the owner wrote their
	// results to the history (Err: the write that failed). KeyFree: as
	// for InBackoffDone, the next turn keeps its key without asking.
	InToolsDone
	// InBackoffDone: the backoff timer Token fired and the continue of
	// Generation it scheduled is due (the timer's owner schedules it, see
	// ArmTimer). KeyFree: the key the session holds (Core.Credential) is
	// free now, as the node's view of its credentials shows, so the retry
	// keeps it without asking the credentials actor.
	InBackoffDone
	// InTimerLost: the backoff timer's owner no longer holds it (a core
	// resumed from its record, on another actor or node); a core in
	// backoff arms the same timer again for what is left of its delay.
	InTimerLost
	// InAbort: the user's global abort (cancels a pending retry, then the stream).
	InAbort
	// InEditGuardAbort: the streaming-edit guard aborted the stream.
	InEditGuardAbort
	// InAbortRetry: the user cancelled the retry (abort_retry, Esc).
	InAbortRetry
	// InSetAutoRetry: retry.enabled becomes Enabled.
	InSetAutoRetry
	// InSetModel: the user picks Model ("provider/model") as the primary.
	InSetModel
	// InCredentialReply answers AskCredentialSwitch of Token: Switched (to
	// Credential), and RetryAt, when the earliest blocked sibling frees up.
	InCredentialReply
	// InFallbackReply answers AskFallback of Token: Switched, From, To,
	// Role, and CooldownUntil, when the primary may be restored; not
	// switched, Back: when the first of the role's models (its primary,
	// the one in use, its chain) comes out of its cooldown (zero: one is
	// out of it now).
	InFallbackReply
	// InBudgetGrant answers AskBudget of Token: the retry may go out At.
	InBudgetGrant
	// InBudgetRelease: the budget lets the held retry of Token go out At.
	InBudgetRelease
	// InCompactionDone: the compaction hook of Generation returned Context,
	// or Err.
	InCompactionDone
	// InStop: the session is shutting down.
	InStop
	// InHistoryFailed: a history write of the last step failed with Err.
	// Like a user abort, nothing of the prompt is retried and it ends, with
	// Err; a model change that could not be written is undone (RevertModel).
	InHistoryFailed
	// InCompact: a caller asks for a compaction between prompts (the
	// RPC's compact); its outcome comes back as InCompactionDone.
	InCompact
	// InAttach: a caller asks for the result of the prompt of Generation
	// (0: the current one). OwnCaller: the prompt's own caller waits for
	// it; Replaces: the attach names that caller's address as the one it
	// replaces (the prompt's handle, which gave that address up).
	InAttach
	// InHandOver: a caller asks the session to leave its actors once at
	// rest, its chain to go on where it is opened next. Taken: the
	// session's history says another activation has it already.
	InHandOver
	// InHandOverFailed: the hand-over's record could not be written (Err);
	// the session stays.
	InHandOverFailed
	// InTaken: the session's history says another activation has the
	// session: this one acts no more.
	InTaken
	// InPassivate: the marker of the passivation that the backoff timer
	// Token asked for came back (ArmTimer's Passivate): every message sent
	// before it was taken.
	InPassivate
	// InWake: a passivated session is with its actors again: its next
	// actor took its state up, or its actor kept it (a message came
	// meanwhile).
	InWake
)

// Input is one thing that happened to a session. Only the fields its Kind
// names are read.
type Input struct {
	Kind InputKind

	Credential string
	Turn       uint64
	DeltaKind  string
	Delta      string
	Message    *messages.AssistantMessage
	Limits     *messages.RateLimits // InRateLimits, InTurnEnded
	Token      uint64
	Generation uint64
	Enabled    bool
	Model      string // InSetModel; InCredentialSelected: the fallback the turn was seated on ("": its own model)

	KeyFree       bool // InBackoffDone, InToolsDone
	Wait          time.Duration
	Queued        int // InCredentialSelected: turns queued for the model's concurrency limit
	Limit         string
	Switched      bool
	Redeemed      bool // InCredentialReply: the switch spent a banked reset
	RetryAt       time.Time
	From, To      string
	Role          string
	CooldownUntil time.Time
	Back          time.Time // InFallbackReply
	At            time.Time // InBudgetGrant, InBudgetRelease, InRateLimits

	Context     []*messages.Entry
	Err         string
	RevertModel bool

	OwnCaller bool // InAttach
	Replaces  bool // InAttach
	Taken     bool // InHandOver
}
