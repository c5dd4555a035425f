package telemetry

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

func messageEnd(session string, ms int64, msg *messages.AssistantMessage) *messages.SessionEvent {
	return event(session, ms, func(ev *messages.SessionEvent) {
		ev.Event = &messages.SessionEvent_MessageEnd{MessageEnd: &messages.MessageEnd{Message: msg}}
	})
}

func retryStart(session string, ms int64, attempt int32) *messages.SessionEvent {
	return event(session, ms, func(ev *messages.SessionEvent) {
		ev.Event = &messages.SessionEvent_AutoRetryStart{AutoRetryStart: &messages.AutoRetryStart{Attempt: attempt, ErrorClass: "transient"}}
	})
}

func runStart(session string, ms int64) *messages.SessionEvent {
	return event(session, ms, func(ev *messages.SessionEvent) {
		ev.Event = &messages.SessionEvent_AgentStart{AgentStart: &messages.AgentStart{Generation: 1}}
	})
}

// With Config.Limit, each attempt span carries the limit its call went
// out under, read as the call went: also when the events come late (the
// retry's call goes out before the first call's message_end is
// observed), and on a tracer alone, without a meter provider.
func TestAttemptCarriesTheLimitItWentOutUnder(t *testing.T) {
	limit := 4
	tel, spans, call := limitedTelemetry(t, &limit)
	tel.Observe(promptStart("a", 0))
	failed := call()
	limit = 1
	answered := call()
	for _, ev := range []*messages.SessionEvent{
		messageEnd("a", 1, failed), agentEnd("a", 1, failed), retryStart("a", 1, 1),
		runStart("a", 2), messageEnd("a", 3, answered), agentEnd("a", 3, answered),
		messageEnd("a", 4, provider.Aborted(nil)), // a turn that made no call: no limit to take
		settled("a", 4),
	} {
		tel.Observe(ev)
	}
	checkLines(t, "spans", limitLines(spans), "musepi.attempt limit=4", "musepi.attempt limit=1", "musepi.prompt")
	if n := len(tel.sentUnder); n != 0 {
		t.Errorf("limits kept for %d sessions once their calls' turns ended", n)
	}
}

// Events lost may hold a turn's message_end: the limits noted are
// dropped, so that no later turn takes the lost one's.
func TestEventsLostDropTheLimitsNoted(t *testing.T) {
	limit := 4
	tel, spans, call := limitedTelemetry(t, &limit)
	tel.Observe(promptStart("a", 0))
	call() // its message_end is lost
	tel.Observe(event("", 1, func(ev *messages.SessionEvent) {
		ev.Event = &messages.SessionEvent_EventsLost{EventsLost: &messages.EventsLost{Count: 3}}
	}))
	limit = 1
	answered := call()
	tel.Observe(messageEnd("a", 2, answered))
	tel.Observe(agentEnd("a", 2, answered))
	tel.Observe(settled("a", 2))
	checkLines(t, "spans", limitLines(spans), "musepi.attempt limit=1", "musepi.prompt")
}

// limitedTelemetry is a Telemetry on a tracer alone whose Config.Limit
// is *limit for model p/m, and a call of session a to p/m through its
// wrapper (a 529, then answers).
func limitedTelemetry(t *testing.T, limit *int) (*Telemetry, *tracetest.InMemoryExporter, func() *messages.AssistantMessage) {
	t.Helper()
	spans := tracetest.NewInMemoryExporter()
	tel, err := New(Config{Tracer: sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)), Clock: clock.NewVirtual(t0),
		Limit: func(provider, model string) (int, bool) { return *limit, provider == "p" && model == "m" }})
	if err != nil {
		t.Fatal(err)
	}
	p := tel.WrapProvider("p", provider.NewScripted(provider.Outcome{Message: provider.Failure(529, "overloaded", nil)},
		provider.Outcome{Message: provider.Text("ok")}))
	return tel, spans, func() *messages.AssistantMessage {
		return p.Stream(context.Background(), provider.Request{SessionID: "a", Model: "m"}, func(provider.Delta) {})
	}
}

// limitLines are the spans as "name limit=N", the limit when they carry one.
func limitLines(spans *tracetest.InMemoryExporter) []string {
	var lines []string
	for _, s := range spans.GetSpans() {
		line := s.Name
		for _, kv := range s.Attributes {
			if kv.Key == AttrConcurrencyLimit {
				line += " limit=" + kv.Value.String()
			}
		}
		lines = append(lines, line)
	}
	return lines
}
