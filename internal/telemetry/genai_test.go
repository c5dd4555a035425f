package telemetry

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// The bucket boundaries the GenAI conventions give their histograms.
var (
	wantDurationBounds = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	wantTokenBounds    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// timed is a provider of a family (gen_ai.provider.name) whose calls take
// a virtual time each and end in the messages given, in order.
type timed struct {
	family string
	clk    *clock.Virtual
	calls  []timedCall
	next   int
}

type timedCall struct {
	took time.Duration
	msg  *messages.AssistantMessage
}

func (p *timed) Stream(ctx context.Context, _ provider.Request, _ func(provider.Delta)) *messages.AssistantMessage {
	c := p.calls[p.next]
	p.next++
	if err := p.clk.Advance(ctx, c.took); err != nil {
		panic(err)
	}
	return c.msg
}

func (p *timed) ResetSession(string) {}

func (p *timed) GenAIProviderName() string { return p.family }

// histogram is the histogram name as collected, with its points rendered
// "attr=value ... = count=N sum=S", sorted.
func (r *recorded) histogram(t *testing.T, name string) (unit string, bounds []float64, points []string) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	line := func(set attribute.Set, count uint64, sum string) string {
		var parts []string
		for _, kv := range set.ToSlice() {
			parts = append(parts, fmt.Sprintf("%s=%s", kv.Key, kv.Value.String()))
		}
		return fmt.Sprintf("%s = count=%d sum=%s", strings.Join(parts, " "), count, sum)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					bounds = p.Bounds
					points = append(points, line(p.Attributes, p.Count, fmt.Sprint(p.Sum)))
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					bounds = p.Bounds
					points = append(points, line(p.Attributes, p.Count, fmt.Sprint(p.Sum)))
				}
			default:
				t.Fatalf("%s: %T, want a histogram", name, m.Data)
			}
			sort.Strings(points)
			return m.Unit, bounds, points
		}
	}
	t.Fatalf("no metric %s", name)
	return "", nil, nil
}

func checkLines(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n  got:  %s\n  want: %s", what, strings.Join(got, "\n        "), strings.Join(want, "\n        "))
	}
}

// Each provider call is one observation of gen_ai.client.operation.duration
// (seconds, the conventions' buckets) with the operation, the provider's
// family, the requested and the answering model, and error.type when it
// failed; the usage it reported is two of gen_ai.client.token.usage
// ({token}, the conventions' buckets), input (cached included) and output.
// MusePi's own metrics are still recorded beside them.
func TestGenAIMetrics(t *testing.T) {
	r := newRecorded(t)
	ok := provider.Text("hi")
	ok.ResponseModel = "m-2026-01"
	ok.Usage = &messages.Usage{Input: 100, CacheRead: 20, CacheWrite: 5, Output: 30}
	p := &timed{family: "openai", clk: r.tel.cfg.Clock.(*clock.Virtual), calls: []timedCall{
		{3 * time.Second, ok},
		{500 * time.Millisecond, provider.Failure(429, "429 Too Many Requests: rate limit exceeded", nil)},
		{250 * time.Millisecond, provider.Failure(0, "connection reset by peer", nil)},
		{time.Second, provider.Aborted(nil)},
	}}
	wrapped := r.tel.WrapProvider("work", p)
	for range p.calls {
		wrapped.Stream(context.Background(), provider.Request{Model: "m"}, nil)
	}
	r.tel.WrapProvider("custom", provider.NewScripted(provider.Outcome{Message: provider.Text("ok")})).
		Stream(context.Background(), provider.Request{Model: "c"}, nil)

	unit, bounds, points := r.histogram(t, "gen_ai.client.operation.duration")
	if unit != "s" || !slices.Equal(bounds, wantDurationBounds) {
		t.Errorf("gen_ai.client.operation.duration: unit %q, bounds %v", unit, bounds)
	}
	const chat = "gen_ai.operation.name=chat "
	checkLines(t, "gen_ai.client.operation.duration", points,
		"error.type=429 "+chat+"gen_ai.provider.name=openai gen_ai.request.model=m = count=1 sum=0.5",
		"error.type=aborted "+chat+"gen_ai.provider.name=openai gen_ai.request.model=m = count=1 sum=1",
		"error.type=transient "+chat+"gen_ai.provider.name=openai gen_ai.request.model=m = count=1 sum=0.25",
		chat+"gen_ai.provider.name=_OTHER gen_ai.request.model=c = count=1 sum=0",
		chat+"gen_ai.provider.name=openai gen_ai.request.model=m gen_ai.response.model=m-2026-01 = count=1 sum=3",
	)
	unit, bounds, points = r.histogram(t, "gen_ai.client.token.usage")
	if unit != "{token}" || !slices.Equal(bounds, wantTokenBounds) {
		t.Errorf("gen_ai.client.token.usage: unit %q, bounds %v", unit, bounds)
	}
	const model = "gen_ai.provider.name=openai gen_ai.request.model=m gen_ai.response.model=m-2026-01 "
	checkLines(t, "gen_ai.client.token.usage", points,
		chat+model+"gen_ai.token.type=input = count=1 sum=125",
		chat+model+"gen_ai.token.type=output = count=1 sum=30",
	)
	_, _, points = r.histogram(t, RequestDuration.Name)
	checkLines(t, RequestDuration.Name, points,
		"model=c outcome=ok provider=custom = count=1 sum=0",
		"model=m outcome=aborted provider=work = count=1 sum=1",
		"model=m outcome=error provider=work = count=2 sum=0.75",
		"model=m outcome=ok provider=work = count=1 sum=3",
	)
}

// agentEnd is an agent_end event of a run whose last turn ended in msg.
func agentEnd(session string, ms int64, msg *messages.AssistantMessage) *messages.SessionEvent {
	return event(session, ms, func(ev *messages.SessionEvent) {
		ev.Event = &messages.SessionEvent_AgentEnd{AgentEnd: &messages.AgentEnd{Message: msg}}
	})
}

// An attempt span is a client span with the GenAI attributes of the turn
// that ended its run: gen_ai.provider.name is the family of the adapter
// configured under the turn's provider name (_OTHER for a provider that
// does not say), and error.type is set on a failure only. A run that
// never ended still says it was a chat.
func TestAttemptSpanGenAI(t *testing.T) {
	r := newRecorded(t)
	r.tel.WrapProvider("claude", &timed{family: "anthropic"})
	failed := provider.Failure(529, "529 Overloaded", nil)
	failed.Provider, failed.Model, failed.ResponseModel = "claude", "sonnet", "sonnet-2026"
	answered := provider.Text("ok")
	answered.Provider, answered.Model = "mine", "m1"
	r.tel.Observe(promptStart("a", 0))
	r.tel.Observe(agentEnd("a", 5, failed))
	r.tel.Observe(settled("a", 6))
	r.tel.Observe(promptStart("b", 10))
	r.tel.Observe(agentEnd("b", 15, answered))
	r.tel.Observe(settled("b", 16))
	r.tel.Observe(promptStart("c", 20)) // interrupted: no agent_end
	if err := r.tel.Close(); err != nil {
		t.Fatal(err)
	}

	var lines []string
	for _, s := range r.spans.GetSpans() {
		line := s.Name + " kind=" + s.SpanKind.String()
		for _, kv := range s.Attributes {
			if k := string(kv.Key); strings.HasPrefix(k, "gen_ai.") || k == AttrErrorType {
				line += " " + k + "=" + kv.Value.String()
			}
		}
		lines = append(lines, line)
	}
	checkLines(t, "spans", lines,
		"musepi.attempt kind=client gen_ai.operation.name=chat gen_ai.provider.name=anthropic gen_ai.request.model=sonnet gen_ai.response.model=sonnet-2026 error.type=529",
		"musepi.prompt kind=internal",
		"musepi.attempt kind=client gen_ai.operation.name=chat gen_ai.provider.name=_OTHER gen_ai.request.model=m1",
		"musepi.prompt kind=internal",
		"musepi.attempt kind=client gen_ai.operation.name=chat",
		"musepi.prompt kind=internal",
	)
	if k := r.spans.GetSpans()[0].SpanKind; k != trace.SpanKindClient {
		t.Errorf("attempt span kind %v, want client", k)
	}
}

// error.type: the HTTP status of an error response, else the failure's
// retry class; "aborted" for a cancelled call, "_OTHER" without a message,
// nothing for a success.
func TestErrorType(t *testing.T) {
	refused := provider.Failure(200, "The response was stopped by the provider's content filter", nil)
	refused.StopDetails = &messages.StopDetails{Type: "sensitive"}
	for _, tc := range []struct {
		msg  *messages.AssistantMessage
		want string
	}{
		{nil, "_OTHER"},
		{provider.Text("ok"), ""},
		{provider.Aborted(nil), "aborted"},
		{provider.Failure(503, "503 Service Unavailable", nil), "503"},
		{provider.Failure(400, "prompt is too long: 300000 tokens > 200000 maximum", nil), "400"},
		{provider.Failure(0, "connection reset by peer", nil), "transient"},
		{provider.Failure(0, "prompt is too long: 300000 tokens > 200000 maximum", nil), "context_overflow"},
		{refused, "classifier_refusal"},
	} {
		if got := ErrorType(tc.msg); got != tc.want {
			t.Errorf("ErrorType(%v) = %q, want %q", tc.msg, got, tc.want)
		}
	}
}

// The Prometheus exporter, set up as `musepi rpc --metrics-addr` sets it
// up, names the GenAI metrics and their labels as PrometheusName and the
// docs/observability.md say.
func TestGenAIPrometheusNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes), otelprom.WithoutScopeInfo())
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewVirtual(t0)
	tel, err := New(Config{Meter: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), Clock: clk,
		Sessions: func() Snapshot { return Snapshot{} }})
	if err != nil {
		t.Fatal(err)
	}
	ok := provider.Text("hi")
	ok.Usage = &messages.Usage{Input: 3, Output: 4}
	tel.WrapProvider("p", &timed{family: "openai", clk: clk, calls: []timedCall{{time.Second, ok}}}).
		Stream(context.Background(), provider.Request{Model: "m"}, nil)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string][]string{}
	for _, f := range families {
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels[f.GetName()] = append(labels[f.GetName()], l.GetName())
		}
	}
	for _, m := range []*Metric{&GenAIOperationDuration, &GenAITokenUsage} {
		got, ok := labels[m.PrometheusName()]
		if !ok {
			t.Errorf("%s: no %s among %v", m.Name, m.PrometheusName(), slices.Sorted(maps.Keys(labels)))
			continue
		}
		if !slices.Contains(got, "gen_ai_provider_name") || !slices.Contains(got, "gen_ai_operation_name") {
			t.Errorf("%s labels %v", m.PrometheusName(), got)
		}
	}
}
