package telemetry

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

var t0 = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)

// recorded is a Telemetry on a manual metric reader and an in-memory span exporter.
type recorded struct {
	tel    *Telemetry
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
}

func newRecorded(t *testing.T) *recorded {
	t.Helper()
	r := &recorded{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter()}
	tel, err := New(Config{
		Meter:    sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader)),
		Tracer:   sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans)),
		Clock:    clock.NewVirtual(t0),
		Log:      slog.New(slog.DiscardHandler),
		Sessions: func() Snapshot { return Snapshot{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	r.tel = tel
	return r
}

// sum is the value of the counter name with attrs (0 if it has no such point).
func (r *recorded) sum(t *testing.T, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	want := attribute.NewSet(attrs...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, p := range s.DataPoints {
					if p.Attributes.Equals(&want) {
						return p.Value
					}
				}
			}
		}
	}
	return 0
}

// running is how many sessions the telemetry keeps.
func (t *Telemetry) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions)
}

func event(session string, ms int64, set func(*messages.SessionEvent)) *messages.SessionEvent {
	ev := &messages.SessionEvent{SessionId: session, TimeMs: t0.UnixMilli() + ms}
	set(ev)
	return ev
}

func promptStart(session string, ms int64) *messages.SessionEvent {
	return event(session, ms, func(ev *messages.SessionEvent) {
		ev.Event = &messages.SessionEvent_AgentStart{AgentStart: &messages.AgentStart{Generation: 1, User: &messages.UserMessage{Text: "hi"}}}
	})
}

func settled(session string, ms int64) *messages.SessionEvent {
	return event(session, ms, func(ev *messages.SessionEvent) {
		ev.Event = &messages.SessionEvent_AgentSettled{AgentSettled: &messages.AgentSettled{Generation: 1, Success: true}}
	})
}

// The telemetry keeps a session only while its prompt runs: events between
// prompts (a model change by the user) keep nothing.
func TestSessionsKeptOnlyWhilePrompting(t *testing.T) {
	r := newRecorded(t)
	r.tel.Observe(event("a", 0, func(ev *messages.SessionEvent) {
		ev.Event = &messages.SessionEvent_ModelChange{ModelChange: &messages.ModelChange{From: "p/m", To: "q/m", Reason: "user"}}
	}))
	if n := r.tel.running(); n != 0 {
		t.Fatalf("a model change between prompts keeps %d sessions", n)
	}
	r.tel.Observe(promptStart("a", 1))
	r.tel.Observe(promptStart("b", 1))
	if n := r.tel.running(); n != 2 {
		t.Fatalf("%d sessions kept, want 2 prompting", n)
	}
	r.tel.Observe(settled("a", 2))
	r.tel.Observe(settled("b", 2))
	if n := r.tel.running(); n != 0 {
		t.Fatalf("%d sessions kept after their prompts settled", n)
	}
	if got := r.sum(t, Prompts.Name, attribute.String("outcome", "success")); got != 2 {
		t.Fatalf("musepi.prompts{success} = %d, want 2", got)
	}
}

// Close ends the spans of a prompt whose last events never came, and
// stops observing.
func TestCloseEndsOpenSpans(t *testing.T) {
	r := newRecorded(t)
	r.tel.Observe(promptStart("a", 0))
	if err := r.tel.Close(); err != nil {
		t.Fatal(err)
	}
	spans := r.spans.GetSpans()
	if len(spans) != 2 || spans[0].Name != SpanAttempt || spans[1].Name != SpanPrompt {
		t.Fatalf("spans after Close: %v", spans.Snapshots())
	}
	if !strings.Contains(spans[1].Status.Description, "shut down") {
		t.Fatalf("prompt span status %+v", spans[1].Status)
	}
	r.tel.Observe(settled("a", 1))
	if got := r.sum(t, Prompts.Name, attribute.String("outcome", "success")); got != 0 {
		t.Fatalf("an event after Close was counted")
	}
}

// panicking is a provider whose Stream panics.
type panicking struct{ provider.Provider }

func (panicking) Stream(context.Context, provider.Request, func(provider.Delta)) *messages.AssistantMessage {
	panic("adapter bug")
}

// The provider wrapper counts failures by HTTP status ("none" without
// one), and a panicking provider as a failure whose panic goes on.
func TestWrapProvider(t *testing.T) {
	r := newRecorded(t)
	ctx := context.Background()
	req := provider.Request{Model: "m"}
	p := provider.NewScripted(
		provider.Outcome{Message: provider.Failure(503, "unavailable", nil)},
		provider.Outcome{Message: provider.Failure(0, "connection reset by peer", nil)},
		provider.Outcome{Message: provider.Text("ok")})
	wrapped := r.tel.WrapProvider("p", p)
	for range 3 {
		wrapped.Stream(ctx, req, func(provider.Delta) {})
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not go on to the caller")
			}
		}()
		r.tel.WrapProvider("bad", panicking{}).Stream(ctx, req, func(provider.Delta) {})
	}()
	for _, tc := range []struct {
		provider, status string
		want             int64
	}{
		{"p", "503", 1},
		{"p", "none", 1},
		{"bad", "none", 1},
	} {
		got := r.sum(t, RequestErrors.Name, attribute.String("provider", tc.provider), attribute.String("model", "m"), attribute.String("status", tc.status))
		if got != tc.want {
			t.Errorf("errors{provider=%s,status=%s} = %d, want %d", tc.provider, tc.status, got, tc.want)
		}
	}
}

// Without a meter provider, providers are not wrapped.
func TestWrapProviderWithoutMeter(t *testing.T) {
	tel, err := New(Config{Tracer: sdktrace.NewTracerProvider(), Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	p := provider.NewScripted()
	if got := tel.WrapProvider("p", p); got != provider.Provider(p) {
		t.Fatalf("wrapped without a meter provider: %T", got)
	}
	if _, err := New(Config{Clock: clock.Real{}}); err == nil {
		t.Fatal("New without a meter or tracer provider: no error")
	}
}

func TestPrometheusNames(t *testing.T) {
	for _, tc := range []struct {
		m    *Metric
		want string
	}{
		{&RetryAttempts, "musepi_retry_attempts_total"},
		{&RetryBackoff, "musepi_retry_backoff_seconds"},
		{&RetryWaiting, "musepi_retry_waiting"},
		{&Sessions, "musepi_sessions"},
		{&BudgetDelayed, "musepi_retry_budget_delayed_total"},
		{&RequestDuration, "musepi_provider_request_duration_seconds"},
		{&GenAIOperationDuration, "gen_ai_client_operation_duration_seconds"},
		{&GenAITokenUsage, "gen_ai_client_token_usage"},
	} {
		if got := tc.m.PrometheusName(); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.m.Name, got, tc.want)
		}
	}
}

func TestClip(t *testing.T) {
	long := strings.Repeat("é", maxErrorText) // 2 bytes each
	got := clip(long)
	if !strings.HasSuffix(got, "…") || len(got) > maxErrorText+len("…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Fatalf("clip cut %d bytes badly", len(got))
	}
	if clip("short") != "short" {
		t.Fatal("clip changed a short text")
	}
}
