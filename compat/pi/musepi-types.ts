// MusePi's additions to pi's RPC protocol: event types pi does not have.
// pi's RpcClient hands them to onEvent listeners, which ignore types they
// do not know. (Extra fields on pi's own events and responses — willRetry,
// errorClass, budgetDelayMs, sessionId, retryAttempt, … — are allowed by
// pi's types and listed in docs/rpc.md.)

/** Once per prompt, when all its work (retries included) is over. */
export interface AgentSettled { type: "agent_settled"; sessionId: string; generation: number; success: boolean; error: string; }
/** A retry switched to a fallback model ("provider/model"). */
export interface RetryFallbackApplied { type: "retry_fallback_applied"; sessionId: string; from: string; to: string; role: string; }
/** The first success on a fallback model. */
export interface RetryFallbackSucceeded { type: "retry_fallback_succeeded"; sessionId: string; model: string; role: string; }
/** The session's model changed. */
export interface ModelChange { type: "model_change"; sessionId: string; from: string; to: string; role: string; reason: "fallback" | "revert" | "user"; }
/** The session moved to another credential of its provider (names, never keys). */
export interface CredentialSwitch { type: "credential_switch"; sessionId: string; provider: string; from: string; to: string; reason: "usage_limit" | "usage_limit_redeemed" | "pacing"; }
/** A turn waits for its key's rate-limit budget (pacing): not a retry; abort and abort_retry cancel it. */
export interface RateLimitWait { type: "rate_limit_wait"; sessionId: string; delayMs: number; provider: string; credential: string; limit: "requests" | "tokens" | "input_tokens" | "output_tokens"; }
/** The provider's retry budget let a held retry (budgetDelayMs of its auto_retry_start) go early: attempt goes out in delayMs. */
export interface RetryReleased { type: "retry_released"; sessionId: string; attempt: number; delayMs: number; }
/** A turn waits for a place within its model's concurrency limit (WithOverloadLimiter): not a retry; abort and abort_retry cancel it. */
export interface CapacityWait { type: "capacity_wait"; sessionId: string; delayMs?: number; provider: string; model: string; queued: number; }
/** The default compaction hook met a context overflow. */
export interface CompactionRequired { type: "compaction_required"; sessionId: string; errorMessage: string; }
/** A slow reader lost events. */
export interface EventsLost { type: "events_lost"; sessionId: string; count: number; }
/** --cluster: the node hosting the session (member: its cluster address) was lost with a prompt waiting. */
export interface HostLost { type: "host_lost"; sessionId: string; member: string; }
/** --cluster: after host_lost, the session was reached again on member (the node that took it over). */
export interface Resumed { type: "resumed"; sessionId: string; member: string; }

export type MusePiEvent = AgentSettled | RetryFallbackApplied | RetryFallbackSucceeded | ModelChange | CredentialSwitch | RateLimitWait | CapacityWait | RetryReleased | CompactionRequired | EventsLost | HostLost | Resumed;
