package musepi

import (
	"time"

	"github.com/musepi/musepi/messages"
)

// Event is one event of a session. Switch on its type:
//
//	switch ev := e.(type) {
//	case musepi.AutoRetryStart:
//		log.Printf("retry %d/%d in %v: %s", ev.Attempt, ev.MaxAttempts, ev.Delay, ev.ErrorClass)
//	case musepi.AgentSettled:
//		...
//	}
//
// The types are AgentStart, MessageUpdate, MessageEnd, AgentEnd,
// AgentSettled, AutoRetryStart, AutoRetryEnd, RetryFallbackApplied,
// RetryFallbackSucceeded, ModelChanged, CredentialSwitch, RateLimitWait,
// CompactionRequired, ToolExecutionStart, ToolExecutionEnd,
// SteeringDelivered, EventsLost, and in a cluster HostLost and Resumed.
// Every one embeds an EventHeader.
type Event interface {
	// Header says which session emitted the event, its place in the
	// session's sequence and when.
	Header() EventHeader
	// Type is the event's name on the wire and in the RPC's "type" field:
	// "auto_retry_start", "agent_settled", ...
	Type() string
}

// EventHeader is what every event carries.
type EventHeader struct {
	SessionID string
	Seq       uint64    // per session, gap-free from 1 (a subscriber may miss some: EventsLost)
	Time      time.Time // on the runtime's clock
	wire      *messages.SessionEvent
}

// Header returns h.
func (h EventHeader) Header() EventHeader { return h }

// Wire is the event as the session's actor sent it: the protobuf wire
// format that the RPC server and the cluster speak (package messages).
// Embedders need it only to forward events in that format; it is nil for
// an event the runtime did not emit.
func (h EventHeader) Wire() *messages.SessionEvent { return h.wire }

// AgentStart: a prompt (or a retry's continue) starts a run.
type AgentStart struct {
	EventHeader
	Generation uint64
	// User is the prompt that starts the run; nil for a retry's continue.
	User *UserMessage
}

// MessageUpdate is a piece of streamed assistant output.
type MessageUpdate struct {
	EventHeader
	Kind  string // "text", "thinking" or "tool_call"
	Delta string
}

// MessageEnd: an assistant message is complete.
type MessageEnd struct {
	EventHeader
	Message *AssistantMessage
}

// AgentEnd: a turn ended.
type AgentEnd struct {
	EventHeader
	Message   *AssistantMessage
	WillRetry bool // a retry chain continues after this turn
}

// AgentSettled: all the work of a prompt is over (answered, failed,
// retries exhausted, cancelled or aborted); emitted exactly once per
// prompt, when Prompt returns.
type AgentSettled struct {
	EventHeader
	Generation uint64
	Success    bool
	Error      string // why it failed ("" on success)
}

// AutoRetryStart: a retry attempt is scheduled after Delay.
type AutoRetryStart struct {
	EventHeader
	Attempt      int           // 1-based
	MaxAttempts  int           // retry.Settings.MaxRetries
	Delay        time.Duration // the backoff before the attempt
	ErrorMessage string        // the error being retried
	// ErrorClass is the class of that error: "transient", "usage_limit",
	// "stale_replay", "classifier_refusal" or "reasonless_abort".
	ErrorClass string
	// BudgetDelay is the part of Delay the provider's retry budget added
	// (0: the retry was not held).
	BudgetDelay time.Duration
}

// AutoRetryEnd: a retry chain ended, once per chain.
type AutoRetryEnd struct {
	EventHeader
	Success    bool
	Attempt    int    // the last attempt
	FinalError string // why it failed ("" on success)
}

// RetryFallbackApplied: a retry switched to a fallback model.
type RetryFallbackApplied struct {
	EventHeader
	From, To string // "provider/model"
	Role     string
}

// RetryFallbackSucceeded: the first success on a fallback model.
type RetryFallbackSucceeded struct {
	EventHeader
	Model string // "provider/model"
	Role  string
}

// ModelChanged: the session's model changed (a fallback, a revert to the
// primary model, or the user's choice); the change is also kept in the
// history.
type ModelChanged struct {
	EventHeader
	ModelChange
}

// CredentialSwitch: the session moved to another credential of its
// provider. It names credentials, never their keys.
type CredentialSwitch struct {
	EventHeader
	Provider string
	From, To string // credential names
	// Reason is "usage_limit", "usage_limit_redeemed" when a banked reset
	// was spent, or "pacing" when the key held had no room for the turn
	// and this one had the most.
	Reason string
}

// RateLimitWait: a turn waits for its key's rate-limit budget (pacing)
// instead of going out to be refused; it goes once the budget has room,
// after about Delay. It is not a retry (no attempt counts); Abort and
// AbortRetry cancel it.
type RateLimitWait struct {
	EventHeader
	Delay      time.Duration
	Provider   string
	Credential string // the key's name, never the key
	Limit      string // "requests", "tokens", "input_tokens" or "output_tokens"
}

// CompactionRequired: the context overflowed the model's window and no
// compaction hook ran; the prompt ends with ErrContextOverflow.
type CompactionRequired struct {
	EventHeader
	ErrorMessage string
}

// ToolExecutionStart: a tool call is about to run.
type ToolExecutionStart struct {
	EventHeader
	Call ToolCall
}

// ToolExecutionEnd: a tool call has its result.
type ToolExecutionEnd struct {
	EventHeader
	Result ToolResult
}

// SteeringDelivered: a steering message joined the running prompt.
type SteeringDelivered struct {
	EventHeader
	User UserMessage
}

// HostLost: the cluster node that hosts the session left the cluster
// without handing it over (killed, paused or cut off) while a prompt
// waited on it. The session's handle on the caller's node makes it, not
// the session: its Seq is 0. The prompt waits for the node that takes the
// session over (Resumed), or ends with ErrHostLeft. A node that leaves
// gracefully hands its sessions over, and no HostLost comes.
type HostLost struct {
	EventHeader
	Member string // the lost node's cluster address, host:port
}

// Resumed: after a HostLost, the handle reached the session again, on
// Member: the node that took the session over (which resumed its retry
// chain from its record, so the prompt goes on there), or the lost node
// listed again. Made by the handle, as HostLost is (Seq 0).
type Resumed struct {
	EventHeader
	Member string // the session's host now, host:port
}

// EventsLost tells a subscriber that fell behind how many events its full
// queue dropped (streamed deltas first, never a terminal event).
type EventsLost struct {
	EventHeader
	Count uint64
}

// Type returns "agent_start".
func (AgentStart) Type() string { return "agent_start" }

// Type returns "message_update".
func (MessageUpdate) Type() string { return "message_update" }

// Type returns "message_end".
func (MessageEnd) Type() string { return "message_end" }

// Type returns "agent_end".
func (AgentEnd) Type() string { return "agent_end" }

// Type returns "agent_settled".
func (AgentSettled) Type() string { return "agent_settled" }

// Type returns "auto_retry_start".
func (AutoRetryStart) Type() string { return "auto_retry_start" }

// Type returns "auto_retry_end".
func (AutoRetryEnd) Type() string { return "auto_retry_end" }

// Type returns "retry_fallback_applied".
func (RetryFallbackApplied) Type() string { return "retry_fallback_applied" }

// Type returns "retry_fallback_succeeded".
func (RetryFallbackSucceeded) Type() string { return "retry_fallback_succeeded" }

// Type returns "model_change".
func (ModelChanged) Type() string { return "model_change" }

// Type returns "credential_switch".
func (CredentialSwitch) Type() string { return "credential_switch" }

// Type returns "rate_limit_wait".
func (RateLimitWait) Type() string { return "rate_limit_wait" }

// Type returns "compaction_required".
func (CompactionRequired) Type() string { return "compaction_required" }

// Type returns "tool_execution_start".
func (ToolExecutionStart) Type() string { return "tool_execution_start" }

// Type returns "tool_execution_end".
func (ToolExecutionEnd) Type() string { return "tool_execution_end" }

// Type returns "steering_delivered".
func (SteeringDelivered) Type() string { return "steering_delivered" }

// Type returns "host_lost".
func (HostLost) Type() string { return "host_lost" }

// Type returns "resumed".
func (Resumed) Type() string { return "resumed" }

// Type returns "events_lost".
func (EventsLost) Type() string { return "events_lost" }
