package telemetry

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// WrapProvider returns p measured under name: each call's duration by
// outcome, its failures by HTTP status, and the GenAI conventions'
// duration and token usage; with Config.Limit, the limit each call went
// out under, for its attempt span. It learns p's gen_ai.provider.name
// (provider.GenAIProviderName) for the attempt spans of turns on name.
// Without a meter provider or Config.Limit it returns p itself.
func (t *Telemetry) WrapProvider(name string, p provider.Provider) provider.Provider {
	family := provider.GenAIProviderName(p)
	t.mu.Lock()
	t.families[name] = family
	t.mu.Unlock()
	if t.cfg.Meter == nil && t.cfg.Limit == nil {
		return p
	}
	return &measured{name: name, family: family, next: p, t: t}
}

// measured is a provider whose calls are measured.
type measured struct {
	name   string // the configured name
	family string // gen_ai.provider.name
	next   provider.Provider
	t      *Telemetry
}

// Stream calls the wrapped provider and records the call, also when the
// provider panics (the panic goes on to the caller).
func (m *measured) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta)) (msg *messages.AssistantMessage) {
	if m.t.cfg.Limit != nil {
		m.t.callSent(req.SessionID, m.name, req.Model)
	}
	start := m.t.cfg.Clock.Now()
	defer func() { m.record(req.Model, m.t.cfg.Clock.Now().Sub(start).Seconds(), msg) }()
	return m.next.Stream(ctx, req, onDelta)
}

// ResetSession passes on to the wrapped provider.
func (m *measured) ResetSession(sessionID string) { m.next.ResetSession(sessionID) }

func (m *measured) record(model string, seconds float64, msg *messages.AssistantMessage) {
	ctx := context.Background()
	prov, mod := attribute.String("provider", m.name), attribute.String("model", orUnknown(model))
	outcome := "ok"
	switch reason := msg.GetStopReason(); {
	case msg == nil || reason == messages.StopReason_STOP_REASON_ERROR:
		outcome = "error"
		status := "none"
		if s := msg.GetHttpStatus(); s != 0 {
			status = strconv.Itoa(int(s))
		}
		m.t.in.requestErrors.Add(ctx, 1, metric.WithAttributes(prov, mod, attribute.String("status", status)))
	case reason == messages.StopReason_STOP_REASON_ABORTED:
		outcome = "aborted"
	}
	m.t.in.requestDuration.Record(ctx, seconds, metric.WithAttributes(prov, mod, attribute.String("outcome", outcome)))
	m.recordGenAI(ctx, model, seconds, msg)
}

// recordGenAI records the call by the GenAI conventions: its duration, and
// the input and output tokens the provider reported.
func (m *measured) recordGenAI(ctx context.Context, model string, seconds float64, msg *messages.AssistantMessage) {
	m.t.in.genAIDuration.Record(ctx, seconds, metric.WithAttributes(genAIAttrs(m.family, model, msg, true)...))
	u := msg.GetUsage()
	if u == nil {
		return
	}
	attrs := genAIAttrs(m.family, model, msg, false)
	n := len(attrs)
	m.t.in.genAITokens.Record(ctx, inputTokens(u), metric.WithAttributes(append(attrs[:n:n], tokenInput)...))
	m.t.in.genAITokens.Record(ctx, u.GetOutput(), metric.WithAttributes(append(attrs[:n:n], tokenOutput)...))
}

// MaxOutputTokens is the wrapped provider's output bound (0: none), which
// pacing reserves.
func (m *measured) MaxOutputTokens() int64 {
	if b, ok := m.next.(provider.OutputBounded); ok {
		return b.MaxOutputTokens()
	}
	return 0
}
