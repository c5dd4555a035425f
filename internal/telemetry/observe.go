package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/session"
)

// unknown is the label of a provider or model the events did not name.
const unknown = "unknown"

// sessionTrack is what the telemetry keeps of a session while it runs a
// prompt; it is dropped when the prompt settles.
type sessionTrack struct {
	id              string
	provider, model string // of the last turn that ended (agent_end)
	waiting         *attribute.Set
	pacing          *pacingWait // the turn waiting for its key's rate-limit budget
	trace           promptTrace
}

// pacingWait is a rate_limit_wait not yet over.
type pacingWait struct {
	at              time.Time
	provider, limit string
}

// Observe records one session event. It is the runtime-wide subscriber:
// events come one at a time, each session's in order.
func (t *Telemetry) Observe(ev *messages.SessionEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	ctx := context.Background()
	at := time.UnixMilli(ev.GetTimeMs())
	s := t.sessions[ev.GetSessionId()]
	switch e := ev.GetEvent().(type) {
	case *messages.SessionEvent_AgentStart:
		t.agentStarted(ctx, ev.GetSessionId(), e.AgentStart, at)
	case *messages.SessionEvent_AgentEnd:
		t.agentEnded(ctx, s, e.AgentEnd, at)
	case *messages.SessionEvent_AutoRetryStart:
		t.retryStarted(ctx, s, e.AutoRetryStart)
	case *messages.SessionEvent_AutoRetryEnd:
		t.retryEnded(ctx, s, e.AutoRetryEnd, at)
	case *messages.SessionEvent_RateLimitWait:
		t.pacingStarted(s, e.RateLimitWait, at)
	case *messages.SessionEvent_MessageUpdate:
		t.pacingEnded(ctx, s, at)
	case *messages.SessionEvent_MessageEnd:
		t.turnEnded(ctx, s, ev.GetSessionId(), at)
	case *messages.SessionEvent_CredentialSwitch:
		t.credentialSwitched(ctx, s, e.CredentialSwitch)
	case *messages.SessionEvent_RetryFallbackApplied:
		t.fallbackApplied(ctx, s, e.RetryFallbackApplied)
	case *messages.SessionEvent_RetryFallbackSucceeded:
		f := e.RetryFallbackSucceeded
		t.in.fallbackSucceeded.Add(ctx, 1, labels("role", f.GetRole(), "model", f.GetModel()))
	case *messages.SessionEvent_ModelChange:
		if c := e.ModelChange; c.GetReason() == "revert" {
			t.in.fallbackReverted.Add(ctx, 1, labels("role", c.GetRole(), "from", c.GetFrom(), "to", c.GetTo()))
		}
	case *messages.SessionEvent_CompactionRequired:
		if s != nil {
			s.trace.decided(DecisionCompaction)
		}
	case *messages.SessionEvent_AgentSettled:
		t.promptSettled(ctx, s, e.AgentSettled, at)
	case *messages.SessionEvent_EventsLost:
		t.eventsLost(ctx, e.EventsLost)
	}
}

// agentStarted records an agent_start: the session is tracked from its
// first, waits no longer, and its run's trace starts.
func (t *Telemetry) agentStarted(ctx context.Context, id string, start *messages.AgentStart, at time.Time) {
	s := t.sessions[id]
	if s == nil {
		s = &sessionTrack{id: id, provider: unknown, model: unknown}
		t.sessions[id] = s
	}
	t.stopWaiting(ctx, s)
	s.trace.runStarted(t.tracer, s.id, start, at)
}

// pacingStarted records a rate_limit_wait at at: the wait it starts.
func (t *Telemetry) pacingStarted(s *sessionTrack, w *messages.RateLimitWait, at time.Time) {
	if s != nil {
		s.pacing = &pacingWait{at: at, provider: orUnknown(w.GetProvider()), limit: w.GetLimit()}
	}
}

// agentEnded records an agent_end: a usage limit it hit, and the provider
// and model of the turn for the attempts that retry it.
func (t *Telemetry) agentEnded(ctx context.Context, s *sessionTrack, end *messages.AgentEnd, at time.Time) {
	msg := end.GetMessage()
	class := retry.Classify(msg, retry.AbortState{User: !end.GetWillRetry()})
	if class == retry.UsageLimit {
		t.in.usageLimits.Add(ctx, 1, labels("provider", orUnknown(msg.GetProvider()), "model", orUnknown(msg.GetModel())))
	}
	if s != nil {
		s.provider, s.model = orUnknown(msg.GetProvider()), orUnknown(msg.GetModel())
		s.trace.runEnded(msg, class, t.familyOf(msg.GetProvider()), at)
	}
}

// retryEnded records an auto_retry_end: the retry chain's outcome, and the
// session no longer waiting.
func (t *Telemetry) retryEnded(ctx context.Context, s *sessionTrack, end *messages.AutoRetryEnd, at time.Time) {
	t.in.chains.Add(ctx, 1, labels("outcome", chainOutcome(end)))
	if s != nil {
		t.stopWaiting(ctx, s)
		s.trace.chainEnded(end, chainOutcome(end), at)
	}
}

// credentialSwitched records a credential_switch.
func (t *Telemetry) credentialSwitched(ctx context.Context, s *sessionTrack, sw *messages.CredentialSwitch) {
	t.in.credSwitches.Add(ctx, 1, labels("provider", sw.GetProvider(), "reason", sw.GetReason()))
	if s != nil {
		s.trace.switched(viaCredential, attribute.String(AttrCredentialTo, sw.GetTo()))
	}
}

// fallbackApplied records a retry_fallback_applied.
func (t *Telemetry) fallbackApplied(ctx context.Context, s *sessionTrack, f *messages.RetryFallbackApplied) {
	t.in.fallbackApplied.Add(ctx, 1, labels("role", f.GetRole(), "from", f.GetFrom(), "to", f.GetTo()))
	if s != nil {
		s.trace.switched(viaFallback, attribute.String(AttrFallbackTo, f.GetTo()))
	}
}

// promptSettled records an agent_settled: the prompt's outcome. The
// session's track ends with it.
func (t *Telemetry) promptSettled(ctx context.Context, s *sessionTrack, st *messages.AgentSettled, at time.Time) {
	t.in.prompts.Add(ctx, 1, labels("outcome", promptOutcome(st)))
	if s != nil {
		t.stopWaiting(ctx, s)
		s.trace.settled(at, st.GetSuccess(), st.GetError())
		delete(t.sessions, s.id)
	}
}

// retryStarted records an auto_retry_start: an attempt of the provider
// and model whose turn failed last, and the session waiting for it.
func (t *Telemetry) retryStarted(ctx context.Context, s *sessionTrack, st *messages.AutoRetryStart) {
	prov, model := unknown, unknown
	if s != nil {
		prov, model = s.provider, s.model
	}
	class := st.GetErrorClass()
	t.in.attempts.Add(ctx, 1, labels("provider", prov, "model", model, "class", class))
	waiting := attribute.NewSet(attribute.String("provider", prov), attribute.String("class", class))
	t.in.backoff.Record(ctx, float64(st.GetDelayMs())/1000, metric.WithAttributeSet(waiting))
	if s == nil {
		return
	}
	t.stopWaiting(ctx, s)
	t.in.waiting.Add(ctx, 1, metric.WithAttributeSet(waiting))
	s.waiting = &waiting
	s.trace.retryScheduled(st)
}

// stopWaiting takes s out of musepi.retry.waiting, if it was counted.
func (t *Telemetry) stopWaiting(ctx context.Context, s *sessionTrack) {
	if s.waiting != nil {
		t.in.waiting.Add(ctx, -1, metric.WithAttributeSet(*s.waiting))
		s.waiting = nil
	}
}

// chainOutcome is the outcome label of an auto_retry_end.
func chainOutcome(end *messages.AutoRetryEnd) string {
	switch {
	case end.GetSuccess():
		return "success"
	case end.GetFinalError() == retry.RetryCancelled:
		return "cancelled"
	case end.GetFinalError() == session.ShutdownError:
		return "shutdown"
	}
	return "failure"
}

// promptOutcome is the outcome label of an agent_settled.
func promptOutcome(st *messages.AgentSettled) string {
	if st.GetSuccess() {
		return "success"
	}
	return "failure"
}

// labels is a measurement option with the attributes of key, value pairs.
func labels(kv ...string) metric.MeasurementOption {
	attrs := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		attrs = append(attrs, attribute.String(kv[i], kv[i+1]))
	}
	return metric.WithAttributes(attrs...)
}

func orUnknown(s string) string {
	if s == "" {
		return unknown
	}
	return s
}

// pacingEnded records the end of a pacing wait: the turn went out.
func (t *Telemetry) pacingEnded(ctx context.Context, s *sessionTrack, at time.Time) {
	if s == nil || s.pacing == nil {
		return
	}
	d := max(at.Sub(s.pacing.at), 0)
	t.in.pacingWait.Record(ctx, d.Seconds(), labels("provider", s.pacing.provider, "limit", s.pacing.limit))
	s.trace.pacingWaited(d)
	s.pacing = nil
}
