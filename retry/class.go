package retry

import (
	"net/http"
	"strings"
	"time"

	"github.com/musepi/musepi/messages"
)

// Class is what classification says about the last assistant message of a turn.
type Class uint8

// The classes, from "nothing to do" to each retryable family.
const (
	// Success is a turn that ended neither in error nor aborted.
	Success Class = iota
	// NotRetryable is a failure the policy does not retry (auth, bad request,
	// content blocked, or output already streamed before the failure).
	NotRetryable
	// ContextOverflow goes to compaction, never to retry.
	ContextOverflow
	// ClassifierRefusal is a refusal from a safety classifier (typed stop details).
	ClassifierRefusal
	// StaleReplay is a replayed item or previous_response_id the provider no longer has.
	StaleReplay
	// UsageLimit is a usage, quota, billing or credit limit.
	UsageLimit
	// Transient is an overload, rate limit, server or network failure.
	Transient
	// ReasonlessAbort is a content-less abort carrying only the generic sentinel.
	ReasonlessAbort
)

var classNames = [...]string{
	Success:           "success",
	NotRetryable:      "not_retryable",
	ContextOverflow:   "context_overflow",
	ClassifierRefusal: "classifier_refusal",
	StaleReplay:       "stale_replay",
	UsageLimit:        "usage_limit",
	Transient:         "transient",
	ReasonlessAbort:   "reasonless_abort",
}

// String returns the snake_case name used in events ("transient", ...).
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "unknown"
}

// Retryable reports whether the class feeds the retry engine.
func (c Class) Retryable() bool { return c >= ClassifierRefusal }

// LoadsProvider reports whether a failure of this class is the provider
// failing under load (overload, rate limit, server or network error): the
// failures a retry budget counts.
func (c Class) LoadsProvider() bool { return c == Transient }

// AllowsModelFallback reports whether a retry of this class may switch models.
// Reason-less aborts are retried without model fallback, and a stale replay
// is retried at once on the same model (the model is not at fault).
func (c Class) AllowsModelFallback() bool { return c != ReasonlessAbort && c != StaleReplay }

// Stop-detail types the classifier reads.
const (
	StopDetailRefusal                       = "refusal"
	StopDetailSensitive                     = "sensitive"
	StopDetailStreamInterruptedAfterContent = "stream_interrupted_after_content"
)

// AbortSentinel is the generic error text of an abort that carries no reason.
const AbortSentinel = "Request was aborted"

// AbortState says which deliberate aborts are in progress in the session.
// Any of them keeps a reason-less abort from being retried.
type AbortState struct {
	User      bool // the user called Abort and the stream has not settled
	Dispose   bool // the session is being disposed or shut down
	EditGuard bool // the streaming-edit guard aborted the stream
}

// Any reports whether any deliberate abort is set.
func (a AbortState) Any() bool { return a.User || a.Dispose || a.EditGuard }

// Classify says what the policy does with msg, the last assistant message of
// a turn. A nil message is NotRetryable. Classification never panics.
func Classify(msg *messages.AssistantMessage, aborts AbortState) Class {
	return classify(msg, aborts, nil)
}

// classify is Classify reading the error text, when it decides by it, into
// r (which may hold that reading already; nil: a reading of its own).
func classify(msg *messages.AssistantMessage, aborts AbortState, r *reading) Class {
	if msg == nil {
		return NotRetryable
	}
	switch msg.GetStopReason() {
	case messages.StopReason_STOP_REASON_ERROR:
	case messages.StopReason_STOP_REASON_ABORTED:
		if isReasonlessAbort(msg, aborts) {
			return ReasonlessAbort
		}
		return NotRetryable
	default:
		return Success
	}
	if msg.GetErrorMessage() == "" {
		return NotRetryable
	}
	status := int(msg.GetHttpStatus())
	if r == nil {
		r = new(reading)
	}
	r.of(msg.GetErrorMessage())
	text := r.provider(status)
	if matchFamily(ContextOverflow, &r.set, text, status) {
		return ContextOverflow
	}
	switch msg.GetStopDetails().GetType() {
	case StopDetailRefusal, StopDetailSensitive:
		return ClassifierRefusal
	}
	for _, c := range [...]Class{StaleReplay, UsageLimit, Transient} {
		if matchFamily(c, &r.set, text, status) {
			if HasObservableOutput(msg) {
				return NotRetryable
			}
			return c
		}
	}
	if isReasonlessAbort(msg, aborts) {
		return ReasonlessAbort
	}
	return NotRetryable
}

// IsContextOverflow reports whether msg failed because the input exceeded
// the model's context window.
func IsContextOverflow(msg *messages.AssistantMessage) bool {
	return Classify(msg, AbortState{}) == ContextOverflow
}

// HasObservableOutput reports whether a failed turn had already produced
// output a user could see: content with output (see ContentHasOutput) or
// the stream_interrupted_after_content stop detail.
func HasObservableOutput(msg *messages.AssistantMessage) bool {
	return msg.GetStopDetails().GetType() == StopDetailStreamInterruptedAfterContent ||
		ContentHasOutput(msg.GetContent())
}

// ContentHasOutput reports whether content holds output a user could see: a
// tool call, text that is not empty after trimming whitespace, or any
// thinking or redacted-thinking block (reasoning streamed by
// OpenAI-compatible servers is thinking). Providers use it to mark a stream
// interrupted after content, so the rule is the same everywhere.
func ContentHasOutput(content []*messages.ContentBlock) bool {
	for _, b := range content {
		switch {
		case b.GetToolCall() != nil:
			return true
		case strings.TrimSpace(b.GetText().GetText()) != "":
			return true
		case b.GetThinking() != nil, b.GetRedactedThinking() != nil:
			return true
		}
	}
	return false
}

// ProviderText is the provider's own part of an error text: text without
// the "<status> <status text>: " line our provider adapters put in front of
// an HTTP error, when that status is the message's. Classification reads the
// status as a number and the provider's words from this text, so that our
// own prefix ("429 Too Many Requests") never decides a class or a reason.
func ProviderText(text string, status int) string {
	if status < 100 || status > 999 || len(text) < 3 || !isDigit(text[0]) || !isDigit(text[1]) || !isDigit(text[2]) ||
		int(text[0]-'0')*100+int(text[1]-'0')*10+int(text[2]-'0') != status {
		return text
	}
	rest := text[3:]
	if st := http.StatusText(status); st != "" && len(rest) > len(st) && rest[0] == ' ' && rest[1:1+len(st)] == st {
		rest = rest[1+len(st):]
	}
	switch {
	case rest == "":
		return ""
	case strings.HasPrefix(rest, ": "):
		return rest[2:]
	}
	return text
}

func isReasonlessAbort(msg *messages.AssistantMessage, aborts AbortState) bool {
	return msg.GetErrorMessage() == AbortSentinel && !aborts.Any() && !HasObservableOutput(msg)
}

// Reading reads one failed turn for a decision: its class, the provider's
// hint and a limit's reason estimate, with the error text read once for
// all three. The zero value is ready; use one per message.
type Reading struct{ r reading }

// Classify is Classify on the reading.
func (rd *Reading) Classify(msg *messages.AssistantMessage, aborts AbortState) Class {
	return classify(msg, aborts, &rd.r)
}

// Hint is ParseHint on the reading.
func (rd *Reading) Hint(headers map[string]string, text string, now time.Time) (Hint, bool) {
	return parseHint(headers, text, now, &rd.r)
}

// LimitWait is LimitWait on the reading.
func (rd *Reading) LimitWait(text string, status int, r float64) (LimitReason, time.Duration) {
	return limitWait(rd.r.of(text), status, r)
}

// TimedOut reports whether the failure whose error text and HTTP status
// are text and status is a time-out: a 408 or 504, or time-out wording
// (a client's time-out, a gRPC deadline, a stalled stream).
func (rd *Reading) TimedOut(text string, status int) bool {
	r := rd.r.of(text)
	return status == 408 || status == 504 || anyIn(timeoutWords, &r.set, r.provider(status))
}

// timeoutWords are the wordings of a time-out.
var timeoutWords = needles("timeout", "timed out", "deadline exceeded", "deadline_exceeded", "etimedout", "stream stalled")

// reading is a failed turn's error text as the policy reads it, once for
// classification, the text hint and the usage-limit reason: the set of the
// byte pairs of the text with its ASCII letters lowered (only those, so
// lowering does not change the length), which rules most substrings out
// without a scan.
type reading struct {
	text string
	read bool
	set  bigramSet
}

// of reads text into r, unless r holds its reading already, and returns r.
func (r *reading) of(text string) *reading {
	if r.read && r.text == text {
		return r
	}
	if r.read {
		clear(r.set[:])
	}
	r.text, r.read = text, true
	r.set.fill(text)
	return r
}

// provider is the provider part of the text read, for a message of HTTP
// status status (see ProviderText).
func (r *reading) provider(status int) string { return ProviderText(r.text, status) }

// ParseClass is the Class named name (Class.String), false for none.
func ParseClass(name string) (Class, bool) {
	for c, n := range classNames {
		if n == name {
			return Class(c), true
		}
	}
	return 0, false
}
