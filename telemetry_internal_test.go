package musepi

import (
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// Telemetry off costs nothing: without a meter or tracer provider no one
// subscribes to the events (so sessions do not even build them), the
// providers are the ones given, and publishing to the runtime-wide
// fan-out allocates nothing. With a meter provider, the telemetry
// subscribes and wraps the providers.
func TestTelemetryOffSubscribesNothing(t *testing.T) {
	p := provider.NewScripted()
	start := func(t *testing.T, opts ...Option) *Runtime { return internalRuntime(t, p, opts...) }

	off := start(t)
	if off.allEvents.HasSubscribers() || off.telemetry != nil {
		t.Fatal("without a meter or tracer provider, something subscribes to the events")
	}
	if off.deps.Providers["p"] != provider.Provider(p) {
		t.Fatalf("without a meter provider, provider p is wrapped: %T", off.deps.Providers["p"])
	}
	ev := &messages.SessionEvent{SessionId: "s", Seq: 1,
		Event: &messages.SessionEvent_AutoRetryStart{AutoRetryStart: &messages.AutoRetryStart{Attempt: 1}}}
	if allocs := testing.AllocsPerRun(1000, func() { off.allEvents.Publish(ev) }); allocs != 0 {
		t.Fatalf("publishing with no subscriber allocates %.1f times per event", allocs)
	}

	on := start(t, WithMeterProvider(sdkmetric.NewMeterProvider()))
	if !on.allEvents.HasSubscribers() {
		t.Fatal("with a meter provider, the telemetry does not subscribe")
	}
	if on.deps.Providers["p"] == provider.Provider(p) {
		t.Fatal("with a meter provider, provider p is not measured")
	}
}
