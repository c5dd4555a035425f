package main

// events is the one definition of a session's events: each one's wire name,
// its place in messages.SessionEvent's oneof, its doc, its fields and, for
// an event of the session core, the core's fields that carry it. From it
// genevent writes messages/events.proto (and protoc its Go code), the Go
// types of package musepi with their conversion from the wire, and the
// core's session.Event with its conversion to the wire.
//
// Adding an event that carries data is one entry here, then
// `go generate ./...`, then the code that emits it and the code that
// consumes it. Rules:
//
//   - A field's protobuf name is its Go name in snake case, "_ms" added for
//     a time.Duration or time.Time (sent in milliseconds); its type follows
//     from its Go type (see goTypes); its number is its place in the list,
//     so a field is added at the end.
//   - A core event (core set) is written to the wire from the core's
//     session.Event: a field reads Core, an expression of ev, or by default
//     ev.<Payload>.<Go name> when the event's core fields are one pointer
//     (its payload), else ev.<Go name>. Core "-" leaves the field to the
//     actor that emits the event.
//   - An event the core does not emit (tool executions, steering, a
//     cluster handle's events) is built in the wire form by whoever emits
//     it; the Go type and its conversion are still generated.
var events = []event{
	{
		name: "agent_start", goName: "AgentStart", number: 18, core: "AgentStart",
		doc: "AgentStart: a prompt (or a retry's continue) starts a run.",
		coreFields: []coreField{
			{"Generation", "uint64", ""},
			{"PromptStart", "bool", "the run a new prompt starts (not a continue)"},
		},
		fields: []field{
			{goName: "Generation", goType: "uint64"},
			{goName: "User", goType: "*UserMessage", core: "-",
				doc: "User is the prompt that starts the run; nil for a retry's continue."},
		},
	},
	{
		name: "message_update", goName: "MessageUpdate", number: 19, core: "MessageUpdate",
		doc: "MessageUpdate is a piece of streamed assistant output.",
		coreFields: []coreField{
			{"DeltaKind", "string", `"text", "thinking", "tool_call"`},
			{"Delta", "string", ""},
		},
		fields: []field{
			{goName: "Kind", goType: "string", core: "ev.DeltaKind", doc: `"text", "thinking" or "tool_call"`},
			{goName: "Delta", goType: "string"},
		},
	},
	{
		name: "message_end", goName: "MessageEnd", number: 20, core: "MessageEnd",
		doc:        "MessageEnd: an assistant message is complete.",
		coreFields: []coreField{{"Message", "*messages.AssistantMessage", ""}},
		fields:     []field{{goName: "Message", goType: "*AssistantMessage", core: "ev.Message"}},
	},
	{
		name: "agent_end", goName: "AgentEnd", number: 15, core: "AgentEnd",
		doc: "AgentEnd: a turn ended.",
		coreFields: []coreField{
			{"Message", "*messages.AssistantMessage", ""},
			{"WillRetry", "bool", ""},
		},
		fields: []field{
			{goName: "Message", goType: "*AssistantMessage"},
			{goName: "WillRetry", goType: "bool", doc: "a retry chain continues after this turn"},
		},
	},
	{
		name: "agent_settled", goName: "AgentSettled", number: 16, core: "AgentSettled",
		doc: "AgentSettled: all the work of a prompt is over (answered, failed,\n" +
			"retries exhausted, cancelled or aborted); emitted exactly once per\n" +
			"prompt, when Prompt returns.",
		coreFields: []coreField{
			{"Generation", "uint64", ""},
			{"Success", "bool", ""},
			{"Error", "string", ""},
		},
		fields: []field{
			{goName: "Generation", goType: "uint64"},
			{goName: "Success", goType: "bool"},
			{goName: "Error", goType: "string", doc: `why it failed ("" on success)`},
		},
	},
	{
		name: "auto_retry_start", goName: "AutoRetryStart", number: 10, core: "AutoRetryStart",
		doc:        "AutoRetryStart: a retry attempt is scheduled after Delay.",
		coreFields: []coreField{{"Start", "*retry.StartEvent", ""}},
		fields: []field{
			{goName: "Attempt", goType: "int", doc: "1-based"},
			{goName: "MaxAttempts", goType: "int", doc: "retry.Settings.MaxRetries"},
			{goName: "Delay", goType: "time.Duration", doc: "the backoff before the attempt"},
			{goName: "ErrorMessage", goType: "string", doc: "the error being retried"},
			{goName: "ErrorClass", goType: "string", core: "ev.Start.Class.String()",
				doc: "ErrorClass is the class of that error: \"transient\", \"usage_limit\",\n" +
					"\"stale_replay\", \"classifier_refusal\" or \"reasonless_abort\"."},
			{goName: "BudgetDelay", goType: "time.Duration",
				doc: "BudgetDelay is the part of Delay the provider's retry budget added\n" +
					"(0: the retry was not held)."},
		},
	},
	{
		name: "auto_retry_end", goName: "AutoRetryEnd", number: 11, core: "AutoRetryEnd",
		doc:        "AutoRetryEnd: a retry chain ended, once per chain.",
		coreFields: []coreField{{"End", "*retry.EndEvent", ""}},
		fields: []field{
			{goName: "Success", goType: "bool"},
			{goName: "Attempt", goType: "int", doc: "the last attempt"},
			{goName: "FinalError", goType: "string", setIf: "!ev.End.Success", doc: `why it failed ("" on success)`},
		},
	},
	{
		name: "retry_released", goName: "RetryReleased", number: 30, core: "RetryReleased",
		doc: "RetryReleased: the provider's retry budget, which held the retry of an\n" +
			"AutoRetryStart with a BudgetDelay, released it early: the attempt goes\n" +
			"out after Delay from now, not when that AutoRetryStart's Delay ends.",
		coreFields: []coreField{
			{"Attempt", "int", ""},
			{"Delay", "time.Duration", ""},
		},
		fields: []field{
			{goName: "Attempt", goType: "int", doc: "the attempt released, as its AutoRetryStart numbered it"},
			{goName: "Delay", goType: "time.Duration", doc: "what is left of its backoff"},
		},
	},
	{
		name: "retry_fallback_applied", goName: "RetryFallbackApplied", number: 12, core: "FallbackApplied",
		doc:        "RetryFallbackApplied: a retry switched to a fallback model.",
		coreFields: []coreField{{"Fallback", "*retry.FallbackEvent", ""}},
		fields: []field{
			{goName: "From", goType: "string", doc: `"provider/model"`},
			{goName: "To", goType: "string", doc: `"provider/model"`},
			{goName: "Role", goType: "string"},
		},
	},
	{
		name: "retry_fallback_succeeded", goName: "RetryFallbackSucceeded", number: 13, core: "FallbackSucceeded",
		doc:        "RetryFallbackSucceeded: the first success on a fallback model.",
		coreFields: []coreField{{"Fallback", "*retry.FallbackEvent", ""}},
		fields: []field{
			{goName: "Model", goType: "string", core: "ev.Fallback.To", doc: `"provider/model"`},
			{goName: "Role", goType: "string"},
		},
	},
	{
		name: "model_change", goName: "ModelChanged", message: "ModelChange", embed: "ModelChange",
		number: 14, core: "ModelChange",
		doc: "ModelChanged: the session's model changed (a fallback, a revert to the\n" +
			"primary model, or the user's choice); the change is also kept in the\n" +
			"history.",
		coreFields: []coreField{{"Change", "*ModelChange", ""}},
		fields: []field{
			{goName: "From", goType: "string"},
			{goName: "To", goType: "string"},
			{goName: "Role", goType: "string"},
			{goName: "Reason", goType: "string", doc: `"fallback", "revert" or "user"`},
			{goName: "Pinned", goType: "bool",
				doc: "the fallback stays until the user changes the model (a refusal); restored with the model when the session resumes"},
			{goName: "PrimaryCooldownUntil", goType: "time.Time", core: "ev.Change.PrimaryUntil",
				doc: "when a fallback may revert to the primary model (cooldown-expiry policy); 0 if unknown"},
		},
	},
	{
		name: "compaction_required", goName: "CompactionRequired", number: 17, core: "CompactionRequired",
		doc: "CompactionRequired: the context overflowed the model's window and no\n" +
			"compaction hook ran; the prompt ends with ErrContextOverflow.",
		coreFields: []coreField{{"Error", "string", ""}},
		fields:     []field{{goName: "ErrorMessage", goType: "string", core: "ev.Error"}},
	},
	{
		name: "credential_switch", goName: "CredentialSwitch", number: 24, core: "CredentialSwitch",
		doc: "CredentialSwitch: the session moved to another credential of its\n" +
			"provider. It names credentials, never their keys.",
		coreFields: []coreField{{"Switch", "*CredentialSwitch", ""}},
		fields: []field{
			{goName: "Provider", goType: "string", core: "provider(ev.Switch.Model)"},
			{goName: "From", goType: "string", doc: "credential name"},
			{goName: "To", goType: "string", doc: "credential name"},
			{goName: "Reason", goType: "string",
				doc: "Reason is \"usage_limit\", \"usage_limit_redeemed\" when a banked reset\n" +
					"was spent, or \"pacing\" when the key held had no room for the turn\n" +
					"and this one had the most."},
		},
	},
	{
		name: "rate_limit_wait", goName: "RateLimitWait", number: 26, core: "RateLimitWait",
		doc: "RateLimitWait: a turn waits for its key's rate-limit budget (pacing)\n" +
			"instead of going out to be refused; it goes once the budget has room,\n" +
			"after about Delay. It is not a retry (no attempt counts); Abort and\n" +
			"AbortRetry cancel it.",
		coreFields: []coreField{{"Wait", "*RateLimitWait", ""}},
		fields: []field{
			{goName: "Delay", goType: "time.Duration"},
			{goName: "Provider", goType: "string", core: "provider(ev.Wait.Model)"},
			{goName: "Credential", goType: "string", doc: "the key's name, never the key"},
			{goName: "Limit", goType: "string", doc: `"requests", "tokens", "input_tokens" or "output_tokens"`},
		},
	},
	{
		name: "capacity_wait", goName: "CapacityWait", number: 31, core: "CapacityWait",
		doc: "CapacityWait: a turn waits for a place within its model's concurrency\n" +
			"limit (WithOverloadLimiter), which the provider's overload answers\n" +
			"lowered, instead of going out to be refused; it goes when an answer\n" +
			"frees a place, in priority order. It is not a retry (no attempt\n" +
			"counts); Abort and AbortRetry cancel it.",
		coreFields: []coreField{{"Capacity", "*CapacityWait", ""}},
		fields: []field{
			{goName: "Delay", goType: "time.Duration", setIf: "ev.Capacity.Delay > 0", doc: "about how long, when known (0: unknown)"},
			{goName: "Provider", goType: "string", core: "provider(ev.Capacity.Model)"},
			{goName: "Model", goType: "string", core: "modelName(ev.Capacity.Model)", doc: "the model's name, without its provider"},
			{goName: "Queued", goType: "int", doc: "the turns waiting for the model, this one included"},
		},
	},
	{
		name: "compaction_end", goName: "CompactionEnd", number: 29, core: "CompactionEnd",
		doc: "CompactionEnd: the compaction hook that ran on a context overflow (after\n" +
			"CompactionRequired) returned. With WillRetry the prompt goes on with the\n" +
			"compacted context; otherwise it ends with ErrContextOverflow.",
		coreFields: []coreField{
			{"Reason", "string", `"overflow"`},
			{"Aborted", "bool", ""},
			{"WillRetry", "bool", ""},
			{"Error", "string", ""},
		},
		fields: []field{
			{goName: "Reason", goType: "string", doc: `"overflow": the context overflowed the model's window`},
			{goName: "Aborted", goType: "bool", doc: "the prompt was aborted while the hook ran"},
			{goName: "WillRetry", goType: "bool", doc: "the prompt goes on with the compacted context"},
			{goName: "ErrorMessage", goType: "string", core: "ev.Error", setIf: `ev.Error != ""`,
				doc: `why the hook failed ("" when it did not)`},
		},
	},
	{
		name: "tool_execution_start", goName: "ToolExecutionStart", number: 22,
		doc:    "ToolExecutionStart: a tool call is about to run.",
		fields: []field{{goName: "Call", goType: "ToolCall"}},
	},
	{
		name: "tool_execution_end", goName: "ToolExecutionEnd", number: 23,
		doc:    "ToolExecutionEnd: a tool call has its result.",
		fields: []field{{goName: "Result", goType: "ToolResult"}},
	},
	{
		name: "steering_delivered", goName: "SteeringDelivered", number: 25,
		doc:    "SteeringDelivered: a steering message joined the running prompt.",
		fields: []field{{goName: "User", goType: "UserMessage"}},
	},
	{
		name: "host_lost", goName: "HostLost", number: 27,
		doc: "HostLost: the cluster node that hosts the session left the cluster\n" +
			"without handing it over (killed, paused or cut off) while a prompt\n" +
			"waited on it. The session's handle on the caller's node makes it, not\n" +
			"the session: its Seq is 0. The prompt waits for the node that takes the\n" +
			"session over (Resumed), or ends with ErrHostLeft. A node that leaves\n" +
			"gracefully hands its sessions over, and no HostLost comes.",
		fields: []field{{goName: "Member", goType: "string", doc: "the lost node's cluster address, host:port"}},
	},
	{
		name: "resumed", goName: "Resumed", number: 28,
		doc: "Resumed: after a HostLost, the handle reached the session again, on\n" +
			"Member: the node that took the session over (which resumed its retry\n" +
			"chain from its record, so the prompt goes on there), or the lost node\n" +
			"listed again. Made by the handle, as HostLost is (Seq 0).",
		fields: []field{{goName: "Member", goType: "string", doc: "the session's host now, host:port"}},
	},
	{
		name: "events_lost", goName: "EventsLost", number: 21,
		doc: "EventsLost tells a subscriber that fell behind how many events its full\n" +
			"queue dropped (streamed deltas first, never a terminal event).",
		fields: []field{{goName: "Count", goType: "uint64"}},
	},
}
