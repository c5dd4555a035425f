package telemetry

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
)

// Span names: one trace per prompt, a span per attempt (each agent run:
// the first, each retry, the run after a compaction) under it.
const (
	SpanPrompt  = "musepi.prompt"
	SpanAttempt = "musepi.attempt"
)

// Span attributes.
const (
	AttrSessionID    = "musepi.session.id"        // prompt
	AttrGeneration   = "musepi.prompt.generation" // prompt
	AttrOutcome      = "musepi.prompt.outcome"    // prompt: success, failure
	AttrAttempts     = "musepi.prompt.attempts"   // prompt: attempt spans it had
	AttrAttempt      = "musepi.attempt"           // attempt: 0 for the first run, else the retry attempt (auto_retry_start.attempt)
	AttrProvider     = "musepi.provider"          // attempt: of the turn that ended the run
	AttrModel        = "musepi.model"
	AttrStopReason   = "musepi.stop_reason" // attempt: stop, tool_use, length, error, aborted
	AttrHTTPStatus   = "http.response.status_code"
	AttrClass        = "musepi.error.class" // attempt: the classification (retry.Class name; auto_retry_start's when retried)
	AttrDecision     = "musepi.decision"    // attempt: what the runtime did after it (Decision*)
	AttrVia          = "musepi.retry.via"   // attempt, when retried: backoff, credential_switch, fallback
	AttrDelayMs      = "musepi.retry.delay_ms"
	AttrNextAttempt  = "musepi.retry.next_attempt"
	AttrBudgetMs     = "musepi.retry.budget_delay_ms"
	AttrFallbackTo   = "musepi.fallback.to"
	AttrCredentialTo = "musepi.credential.to"
	AttrFinalError   = "musepi.retry.final_error" // attempt, when the chain gave up after it
	AttrPacingWaitMs = "musepi.pacing.wait_ms"    // attempt: how long its turns waited for their key's rate-limit budget
	EventChainEnd    = "musepi.retry_chain_end"   // prompt span event: auto_retry_end
	// AttrConcurrencyLimit is on an attempt with the overload limiter on:
	// its model's concurrency limit as its (last) call went out.
	AttrConcurrencyLimit = "musepi.concurrency_limit"
)

// Decisions: what the runtime did after an attempt (musepi.decision).
const (
	DecisionSuccess     = "success"     // the run answered
	DecisionRetry       = "retry"       // a retry was scheduled (musepi.retry.via says how)
	DecisionGiveUp      = "give_up"     // the retry chain ended without success here
	DecisionFail        = "fail"        // a failure no retry chain took up (not retryable, retry off)
	DecisionAborted     = "aborted"     // the run was aborted
	DecisionCompaction  = "compaction"  // a context overflow went to compaction
	DecisionInterrupted = "interrupted" // the prompt settled before the run ended (shutdown)
)

// How a retry was made (musepi.retry.via).
const (
	viaBackoff    = "backoff"
	viaCredential = "credential_switch"
	viaFallback   = "fallback"
)

// maxErrorText bounds the error text a span status carries.
const maxErrorText = 512

// promptTrace is the trace of a session's running prompt.
type promptTrace struct {
	prompt   trace.Span
	ctx      context.Context
	attempts int
	next     int // the attempt number of the next run (auto_retry_start)
	run      *attemptSpan
}

// attemptSpan is an attempt whose span is still open: it ends (at the time
// of its agent_end) once the decision that follows is known, when the next
// run starts or the prompt settles.
type attemptSpan struct {
	span     trace.Span
	end      time.Time
	class    string // the classification; auto_retry_start's when retried
	decision string
	via      string
	attrs    []attribute.KeyValue
	failure  string
	pacing   time.Duration // waited for rate-limit budgets
}

// runStarted opens the prompt's trace (for a new prompt) and a span for the run.
func (p *promptTrace) runStarted(tracer trace.Tracer, sessionID string, st *messages.AgentStart, at time.Time) {
	p.finishRun(at)
	if st.GetUser() != nil || p.prompt == nil {
		p.end(at, false, "a new prompt started") // never open: a prompt ends before the next starts
		p.ctx, p.prompt = tracer.Start(context.Background(), SpanPrompt, trace.WithNewRoot(), trace.WithTimestamp(at),
			trace.WithAttributes(attribute.String(AttrSessionID, sessionID), attribute.Int64(AttrGeneration, int64(st.GetGeneration()))))
		p.attempts, p.next = 0, 0
	}
	_, span := tracer.Start(p.ctx, SpanAttempt, trace.WithTimestamp(at), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.Int(AttrAttempt, p.next), genAIChat))
	p.attempts++
	p.next = 0
	p.run = &attemptSpan{span: span}
}

// runEnded records how the run ended (agent_end) and the decision known
// so far; family is the gen_ai.provider.name of the turn's provider.
func (p *promptTrace) runEnded(msg *messages.AssistantMessage, class retry.Class, family string, at time.Time) {
	r := p.run
	if r == nil {
		return
	}
	r.end = at
	reason := strings.ToLower(strings.TrimPrefix(msg.GetStopReason().String(), "STOP_REASON_"))
	r.attrs = append(r.attrs, attribute.String(AttrProvider, orUnknown(msg.GetProvider())),
		attribute.String(AttrModel, orUnknown(msg.GetModel())), attribute.String(AttrStopReason, reason))
	r.attrs = append(r.attrs, genAIAttrs(family, msg.GetModel(), msg, true)...)
	r.class = class.String()
	if status := msg.GetHttpStatus(); status != 0 {
		r.attrs = append(r.attrs, attribute.Int(AttrHTTPStatus, int(status)))
	}
	switch msg.GetStopReason() {
	case messages.StopReason_STOP_REASON_ERROR:
		r.decision, r.failure = DecisionFail, msg.GetErrorMessage()
	case messages.StopReason_STOP_REASON_ABORTED:
		r.decision, r.failure = DecisionAborted, msg.GetErrorMessage()
	default:
		r.decision = DecisionSuccess
	}
}

// switched records a credential switch or model fallback made for the
// coming retry.
func (p *promptTrace) switched(via string, attr attribute.KeyValue) {
	if r := p.run; r != nil {
		r.via = via
		r.attrs = append(r.attrs, attr)
	}
}

// retryScheduled records the auto_retry_start that follows the run.
func (p *promptTrace) retryScheduled(st *messages.AutoRetryStart) {
	p.next = int(st.GetAttempt())
	r := p.run
	if r == nil {
		return
	}
	r.decision, r.class = DecisionRetry, st.GetErrorClass()
	if r.via == "" {
		r.via = viaBackoff
	}
	r.attrs = append(r.attrs, attribute.String(AttrVia, r.via),
		attribute.Int64(AttrDelayMs, st.GetDelayMs()), attribute.Int(AttrNextAttempt, int(st.GetAttempt())))
	if b := st.GetBudgetDelayMs(); b > 0 {
		r.attrs = append(r.attrs, attribute.Int64(AttrBudgetMs, b))
	}
}

// chainEnded records an auto_retry_end: on the prompt span, and as the
// decision after the run when the chain gave up at it.
func (p *promptTrace) chainEnded(end *messages.AutoRetryEnd, outcome string, at time.Time) {
	if p.prompt != nil {
		p.prompt.AddEvent(EventChainEnd, trace.WithTimestamp(at), trace.WithAttributes(
			attribute.String("outcome", outcome), attribute.Int("attempt", int(end.GetAttempt()))))
	}
	if r := p.run; r != nil && !end.GetSuccess() && r.decision != DecisionRetry {
		r.decision = DecisionGiveUp
		r.attrs = append(r.attrs, attribute.String(AttrFinalError, clip(end.GetFinalError())))
	}
}

// decided sets the decision after the run.
func (p *promptTrace) decided(decision string) {
	if p.run != nil {
		p.run.decision = decision
	}
}

// settled ends the prompt's trace.
func (p *promptTrace) settled(at time.Time, success bool, errText string) {
	p.finishRun(at)
	p.end(at, success, errText)
}

// finishRun ends the open attempt span with its decision.
func (p *promptTrace) finishRun(at time.Time) {
	r := p.run
	if r == nil {
		return
	}
	p.run = nil
	if r.end.IsZero() {
		r.end, r.decision = at, DecisionInterrupted
	}
	r.span.SetAttributes(r.attrs...)
	if r.class != "" {
		r.span.SetAttributes(attribute.String(AttrClass, r.class))
	}
	r.span.SetAttributes(attribute.String(AttrDecision, r.decision))
	if r.failure != "" {
		r.span.SetStatus(codes.Error, clip(r.failure))
	}
	r.span.End(trace.WithTimestamp(r.end))
}

// end ends the prompt span, if open.
func (p *promptTrace) end(at time.Time, success bool, errText string) {
	if p.prompt == nil {
		return
	}
	outcome := "failure"
	if success {
		outcome = "success"
	}
	p.prompt.SetAttributes(attribute.String(AttrOutcome, outcome), attribute.Int(AttrAttempts, p.attempts))
	if !success {
		p.prompt.SetStatus(codes.Error, clip(errText))
	}
	p.prompt.End(trace.WithTimestamp(at))
	p.prompt, p.ctx = nil, nil
}

// clip bounds an error text for a span.
func clip(s string) string {
	if len(s) <= maxErrorText {
		return s
	}
	cut := maxErrorText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// pacingWaited adds a pacing wait of d to the running attempt's span.
func (p *promptTrace) pacingWaited(d time.Duration) {
	if p.run == nil {
		return
	}
	p.run.pacing += d
	p.run.span.SetAttributes(attribute.Int64(AttrPacingWaitMs, p.run.pacing.Milliseconds()))
}
