package musepi_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// tracedHarness is a harness whose runtime records its traces in memory.
func tracedHarness(t *testing.T, opts ...musepi.Option) (*harness, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return newHarness(t, append(opts, musepi.WithTracerProvider(tp))...), exp
}

// spanLine renders a span as "name attr=value ..." with the attributes
// keys lists, in that order, and "status=error" for an error status.
func spanLine(s tracetest.SpanStub, keys ...string) string {
	attrs := map[attribute.Key]string{}
	for _, kv := range s.Attributes {
		attrs[kv.Key] = kv.Value.String()
	}
	line := s.Name
	for _, k := range keys {
		if v, ok := attrs[attribute.Key(k)]; ok {
			line += " " + k + "=" + v
		}
	}
	if s.Status.Code == codes.Error {
		line += " status=error"
	}
	return line
}

var attemptKeys = []string{"musepi.attempt", "musepi.provider", "musepi.model", "http.response.status_code",
	"musepi.error.class", "musepi.decision", "musepi.retry.via", "musepi.fallback.to", "musepi.retry.delay_ms",
	"musepi.retry.next_attempt"}

// One trace per prompt: a prompt that fell back once (p/m overloaded →
// q/m2 at once, retry attempt 1) and retried twice (q/m2 503 → a 1 s
// backoff, retry attempt 2) is a prompt span with three attempt spans,
// each carrying its classification and the decision that followed.
func TestTracePromptRetriedTwiceFellBackOnce(t *testing.T) {
	h, exp := tracedHarness(t, musepi.WithRetrySettings(withFallback(fallbackModel)))
	s, _ := h.session()
	h.p.SetScript(s.ID(), overloaded)
	h.other.SetScript(s.ID(), fail(503, "503 Service Unavailable"), answer("from q"))
	expectAnswer(t, h.runPrompt(s, "hi"), "from q")

	spans := exp.GetSpans()
	// Spans are exported as they end: the attempts, then the prompt.
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4 (a prompt and three attempts): %v", len(spans), spans.Snapshots())
	}
	prompt := spans[3]
	var lines []string
	for _, sp := range spans[:3] {
		lines = append(lines, spanLine(sp, attemptKeys...))
		if sp.Parent.SpanID() != prompt.SpanContext.SpanID() || sp.SpanContext.TraceID() != prompt.SpanContext.TraceID() {
			t.Errorf("span %s is not a child of the prompt span", sp.Name)
		}
	}
	lines = append(lines, spanLine(prompt, "musepi.session.id", "musepi.prompt.generation", "musepi.prompt.outcome", "musepi.prompt.attempts"))
	expectLines(t, lines,
		"musepi.attempt musepi.attempt=0 musepi.provider=p musepi.model=m http.response.status_code=529 musepi.error.class=transient musepi.decision=retry musepi.retry.via=fallback musepi.fallback.to=q/m2 musepi.retry.delay_ms=0 musepi.retry.next_attempt=1 status=error",
		"musepi.attempt musepi.attempt=1 musepi.provider=q musepi.model=m2 http.response.status_code=503 musepi.error.class=transient musepi.decision=retry musepi.retry.via=backoff musepi.retry.delay_ms=1000 musepi.retry.next_attempt=2 status=error",
		"musepi.attempt musepi.attempt=2 musepi.provider=q musepi.model=m2 musepi.error.class=success musepi.decision=success",
		"musepi.prompt musepi.session.id="+s.ID()+" musepi.prompt.generation=1 musepi.prompt.outcome=success musepi.prompt.attempts=3",
	)
	if prompt.Parent.IsValid() {
		t.Errorf("the prompt span has a parent %v; want the root of its own trace", prompt.Parent)
	}
	// The backoff, then the continue's 1 ms (spec 3, step 13).
	if got := spans[2].StartTime.Sub(spans[1].EndTime); got != time.Second+time.Millisecond {
		t.Errorf("attempt 2 started %v after attempt 1 ended, want the 1 s backoff and 1 ms", got)
	}
	if ev := prompt.Events; len(ev) != 1 || ev[0].Name != "musepi.retry_chain_end" {
		t.Errorf("prompt span events %v, want one musepi.retry_chain_end", ev)
	}

	// The next prompt is a trace of its own.
	exp.Reset()
	expectAnswer(t, h.runPrompt(s, "again"), "from q")
	next := exp.GetSpans()
	if len(next) != 2 || next[1].SpanContext.TraceID() == prompt.SpanContext.TraceID() {
		t.Fatalf("second prompt: %d spans, trace %v (first %v); want 2 spans in a new trace",
			len(next), next[len(next)-1].SpanContext.TraceID(), prompt.SpanContext.TraceID())
	}
}

// A chain that gives up is the decision after its last attempt.
func TestTraceGiveUpAndNotRetryable(t *testing.T) {
	settings := noFallback()
	settings.MaxRetries = 1
	h, exp := tracedHarness(t, musepi.WithRetrySettings(settings))
	s, _ := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), fail(503, "503 Service Unavailable"), fail(400, "invalid request"))
	expectErr(t, h.runPrompt(s, "one"), musepi.ErrPromptFailed)
	expectErr(t, h.runPrompt(s, "two"), musepi.ErrPromptFailed)
	var lines []string
	for _, sp := range exp.GetSpans() {
		lines = append(lines, spanLine(sp, "musepi.attempt", "musepi.error.class", "musepi.decision", "musepi.retry.final_error", "musepi.prompt.outcome"))
	}
	expectLines(t, lines,
		"musepi.attempt musepi.attempt=0 musepi.error.class=transient musepi.decision=retry status=error",
		"musepi.attempt musepi.attempt=1 musepi.error.class=transient musepi.decision=give_up musepi.retry.final_error=503 Service Unavailable status=error",
		"musepi.prompt musepi.prompt.outcome=failure status=error",
		"musepi.attempt musepi.attempt=0 musepi.error.class=not_retryable musepi.decision=fail status=error",
		"musepi.prompt musepi.prompt.outcome=failure status=error",
	)
}

// meteredHarness is a harness whose runtime records metrics on a manual reader.
func meteredHarness(t *testing.T, creds []musepi.Credential, opts ...musepi.Option) (*harness, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return newHarnessCreds(t, creds, append(opts, musepi.WithMeterProvider(mp))...), reader
}

// metricLines collects reader's metrics as "name label=value ... = value"
// lines, sorted, for the metrics named (histograms: "count=N sum=S").
func metricLines(t *testing.T, reader *sdkmetric.ManualReader, names ...string) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []string
	line := func(name string, set attribute.Set, value string) {
		parts := []string{name}
		for _, kv := range set.ToSlice() {
			parts = append(parts, fmt.Sprintf("%s=%s", kv.Key, kv.Value.String()))
		}
		out = append(out, strings.Join(parts, " ")+" = "+value)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if !slices.Contains(names, m.Name) {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					line(m.Name, p.Attributes, fmt.Sprint(p.Value))
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					line(m.Name, p.Attributes, fmt.Sprint(p.Value))
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					line(m.Name, p.Attributes, fmt.Sprint(p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					line(m.Name, p.Attributes, fmt.Sprintf("count=%d sum=%g", p.Count, p.Sum))
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					line(m.Name, p.Attributes, fmt.Sprintf("count=%d sum=%d", p.Count, p.Sum))
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	sort.Strings(out)
	return out
}

// The metrics of four prompts: a usage limit switching keys, an overload
// falling back to q/m2 and a 503 backed off there; a 400; a 503 asking for
// more than retry.maxDelayMs; a 503 whose backoff is cancelled.
func TestMetricsOfRetries(t *testing.T) {
	settings := withFallback(fallbackModel)
	h, reader := meteredHarness(t, twoKeys, musepi.WithRetrySettings(settings))

	s1, _ := h.session()
	h.p.SetScript(s1.ID(), fail(429, "usage_limit_reached: You have hit your usage limit"), overloaded)
	h.other.SetScript(s1.ID(), fail(503, "503 Service Unavailable"), answer("from q"))
	expectAnswer(t, h.runPrompt(s1, "one"), "from q")

	s2, _ := h.session()
	h.p.SetScript(s2.ID(), fail(400, "invalid request"))
	expectErr(t, h.runPrompt(s2, "two"), musepi.ErrPromptFailed)

	s3, _ := h.session(musepi.WithRole("solo")) // no fallback chain
	h.p.SetScript(s3.ID(), fail(503, "503 Service Unavailable", "retry-after", "600"))
	expectErr(t, h.runPrompt(s3, "three"), musepi.ErrPromptFailed)

	s4, _ := h.session(musepi.WithRole("solo"))
	h.p.SetScript(s4.ID(), fail(503, "503 Service Unavailable", "retry-after", "30"))
	ch := h.prompt(s4, "four")
	h.advance(time.Second)
	expectLines(t, metricLines(t, reader, "musepi.retry.waiting", "musepi.retry.chains.open", "musepi.sessions"),
		"musepi.retry.chains.open = 1",
		"musepi.retry.waiting class=transient provider=p = 1",
		"musepi.retry.waiting class=transient provider=q = 0",
		"musepi.retry.waiting class=usage_limit provider=p = 0",
		"musepi.sessions state=backoff = 1",
		"musepi.sessions state=compacting = 0",
		"musepi.sessions state=deciding = 0",
		"musepi.sessions state=idle = 3",
		"musepi.sessions state=running_tools = 0",
		"musepi.sessions state=selecting_credential = 0",
		"musepi.sessions state=streaming = 0",
	)
	s4.AbortRetry()
	h.run()
	expectErr(t, h.settle(ch), musepi.ErrRetryCancelled)

	expectLines(t, metricLines(t, reader, "musepi.retry.attempts", "musepi.retry.backoff", "musepi.retry.waiting",
		"musepi.retry.chains", "musepi.usage_limits", "musepi.credential.switches", "musepi.fallback.applied",
		"musepi.fallback.succeeded", "musepi.prompts", "musepi.provider.request.errors", "musepi.telemetry.events_lost"),
		"musepi.credential.switches provider=p reason=usage_limit = 1",
		"musepi.fallback.applied from=p/m role=default to=q/m2 = 1",
		"musepi.fallback.succeeded model=q/m2 role=default = 1",
		"musepi.prompts outcome=failure = 3",
		"musepi.prompts outcome=success = 1",
		"musepi.provider.request.errors model=m provider=p status=400 = 1",
		"musepi.provider.request.errors model=m provider=p status=429 = 1",
		"musepi.provider.request.errors model=m provider=p status=503 = 2",
		"musepi.provider.request.errors model=m provider=p status=529 = 1",
		"musepi.provider.request.errors model=m2 provider=q status=503 = 1",
		"musepi.retry.attempts class=transient model=m provider=p = 2",
		"musepi.retry.attempts class=transient model=m2 provider=q = 1",
		"musepi.retry.attempts class=usage_limit model=m provider=p = 1",
		"musepi.retry.backoff class=transient provider=p = count=2 sum=30",
		"musepi.retry.backoff class=transient provider=q = count=1 sum=2",
		"musepi.retry.backoff class=usage_limit provider=p = count=1 sum=0",
		"musepi.retry.chains outcome=cancelled = 1",
		"musepi.retry.chains outcome=failure = 1",
		"musepi.retry.chains outcome=success = 1",
		"musepi.retry.waiting class=transient provider=p = 0",
		"musepi.retry.waiting class=transient provider=q = 0",
		"musepi.retry.waiting class=usage_limit provider=p = 0",
		"musepi.usage_limits model=m provider=p = 1",
	)
}

// A session returning to its primary model after the cooldown counts a revert.
func TestMetricsFallbackReverted(t *testing.T) {
	h, reader := meteredHarness(t, nil, musepi.WithRetrySettings(withFallback(fallbackModel)))
	s, _ := h.session()
	h.p.SetScript(s.ID(), overloaded, answer("from p"))
	h.other.SetScript(s.ID(), answer("from q"))
	expectAnswer(t, h.runPrompt(s, "one"), "from q")
	h.advance(2 * time.Minute) // past the primary's cooldown
	expectAnswer(t, h.runPrompt(s, "two"), "from p")
	expectLines(t, metricLines(t, reader, "musepi.fallback.applied", "musepi.fallback.reverted"),
		"musepi.fallback.applied from=p/m role=default to=q/m2 = 1",
		"musepi.fallback.reverted from=q/m2 role=default to=p/m = 1",
	)
}

// The retry budget's tokens, held and delayed retries are observed per
// provider, as Runtime.RetryBudget reports them. With a bucket of 2, the
// first 503 spends half of it, so its retry is held until the next probe.
func TestMetricsRetryBudget(t *testing.T) {
	settings := noFallback()
	settings.Budget.Enabled = true
	settings.Budget.MaxTokens = 2
	settings.Budget.ProbeInterval = 5 * time.Second // later than the backoff: a held retry is delayed
	h, reader := meteredHarness(t, nil, musepi.WithRetrySettings(settings))
	s, _ := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), fail(503, "503 Service Unavailable"), answer("hello"))
	expectAnswer(t, h.runPrompt(s, "hi"), "hello")
	st, err := h.rt.RetryBudget(context.Background(), "p")
	if err != nil {
		t.Fatal(err)
	}
	if st.Delayed == 0 {
		t.Fatalf("budget %+v: no retry delayed", st)
	}
	expectLines(t, metricLines(t, reader, "musepi.retry.budget.tokens", "musepi.retry.budget.held", "musepi.retry.budget.delayed"),
		fmt.Sprintf("musepi.retry.budget.delayed provider=p = %d", st.Delayed),
		"musepi.retry.budget.delayed provider=q = 0",
		fmt.Sprintf("musepi.retry.budget.held provider=p = %d", st.Held),
		"musepi.retry.budget.held provider=q = 0",
		fmt.Sprintf("musepi.retry.budget.tokens provider=p = %g", st.Tokens),
		"musepi.retry.budget.tokens provider=q = 2",
	)
}

// bedrock is a custom provider on the Go types that says whose API it
// speaks: a 503 first, then an answer with its usage and response model.
type bedrock struct{ calls atomic.Int32 }

func (p *bedrock) Stream(context.Context, musepi.ProviderRequest, func(musepi.Delta)) *musepi.AssistantMessage {
	if p.calls.Add(1) == 1 {
		return &musepi.AssistantMessage{StopReason: musepi.StopReasonError, HTTPStatus: 503, ErrorMessage: "503 Service Unavailable"}
	}
	return &musepi.AssistantMessage{StopReason: musepi.StopReasonStop, Content: []musepi.Block{musepi.TextBlock{Text: "Hello"}},
		ResponseModel: "m1-v2", Usage: &musepi.Usage{Input: 10, CacheRead: 2, Output: 5}}
}

func (p *bedrock) ResetSession(string) {}

func (p *bedrock) GenAIProviderName() string { return "aws.bedrock" }

// The GenAI conventions' metrics and attempt span attributes name the
// provider by the family it says (a custom provider's GenAIProviderName),
// _OTHER when it says none, never by its configured name; the usage and
// response model of a custom provider's message reach them.
func TestMetricsGenAI(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h, reader := meteredHarness(t, nil, musepi.WithCustomProvider("g", &bedrock{}), musepi.WithTracerProvider(tp))
	s, _ := h.session(musepi.WithModel("g/m1"))
	expectAnswer(t, h.runPrompt(s, "hi"), "Hello")
	s2, _ := h.session()
	h.p.SetScript(s2.ID(), answer("from p"))
	expectAnswer(t, h.runPrompt(s2, "hi"), "from p")

	const bedrockM1 = "gen_ai.operation.name=chat gen_ai.provider.name=aws.bedrock gen_ai.request.model=m1"
	expectLines(t, metricLines(t, reader, "gen_ai.client.operation.duration", "gen_ai.client.token.usage"),
		"gen_ai.client.operation.duration error.type=503 "+bedrockM1+" = count=1 sum=0",
		"gen_ai.client.operation.duration gen_ai.operation.name=chat gen_ai.provider.name=_OTHER gen_ai.request.model=m = count=1 sum=0",
		"gen_ai.client.operation.duration "+bedrockM1+" gen_ai.response.model=m1-v2 = count=1 sum=0",
		"gen_ai.client.token.usage "+bedrockM1+" gen_ai.response.model=m1-v2 gen_ai.token.type=input = count=1 sum=12",
		"gen_ai.client.token.usage "+bedrockM1+" gen_ai.response.model=m1-v2 gen_ai.token.type=output = count=1 sum=5",
	)
	var lines []string
	for _, sp := range exp.GetSpans() {
		if sp.Name == "musepi.attempt" {
			lines = append(lines, sp.SpanKind.String()+" "+spanLine(sp, "musepi.provider", "gen_ai.provider.name",
				"gen_ai.request.model", "gen_ai.response.model", "error.type"))
		}
	}
	expectLines(t, lines,
		"client musepi.attempt musepi.provider=g gen_ai.provider.name=aws.bedrock gen_ai.request.model=m1 error.type=503 status=error",
		"client musepi.attempt musepi.provider=g gen_ai.provider.name=aws.bedrock gen_ai.request.model=m1 gen_ai.response.model=m1-v2",
		"client musepi.attempt musepi.provider=p gen_ai.provider.name=_OTHER gen_ai.request.model=m",
	)
}

// NewRuntime refuses nil providers, naming the option.
func TestTelemetryOptionsRefuseNil(t *testing.T) {
	for _, tc := range []struct {
		opt  musepi.Option
		want string
	}{
		{musepi.WithMeterProvider(nil), "WithMeterProvider: nil meter provider"},
		{musepi.WithTracerProvider(nil), "WithTracerProvider: nil tracer provider"},
	} {
		_, err := musepi.NewRuntime(musepi.WithProvider("p", newHarness(t).p), tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewRuntime: %v, want an error saying %q", err, tc.want)
		}
	}
}

// Shutdown lets the telemetry take every event of the stopped sessions
// before it stops: on the wall clock, the prompts that returned just
// before Shutdown are all counted.
func TestMetricsFlushedByShutdown(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	p := provider.NewScripted(answer("hello"))
	rt, err := musepi.NewRuntime(musepi.WithProvider("p", p), musepi.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	ctx := context.Background()
	errs := make(chan error, n)
	for range n {
		s, err := rt.NewSession(ctx, musepi.WithModel("p/m"))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := s.Prompt(ctx, "hi")
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rt.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	expectLines(t, metricLines(t, reader, "musepi.prompts"), fmt.Sprintf("musepi.prompts outcome=success = %d", n))
}

// flaky fails every other call with a 503: each prompt retries once.
type flaky struct{ calls atomic.Int64 }

func (f *flaky) Stream(context.Context, provider.Request, func(provider.Delta)) *messages.AssistantMessage {
	if f.calls.Add(1)%2 == 1 {
		return provider.Failure(503, "503 Service Unavailable", nil)
	}
	return provider.Text("ok")
}

func (f *flaky) ResetSession(string) {}

// BenchmarkPromptTelemetry is the cost of telemetry per prompt (one that
// retries once after a 503), on the virtual clock: off, with metrics (the
// SDK's meter provider on a manual reader), with metrics and traces (the
// SDK's tracer provider, spans dropped by a no-op exporter).
func BenchmarkPromptTelemetry(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts func() []musepi.Option
	}{
		{"off", func() []musepi.Option { return nil }},
		{"metrics", func() []musepi.Option {
			return []musepi.Option{musepi.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))}
		}},
		{"metrics+traces", func() []musepi.Option {
			return []musepi.Option{musepi.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))),
				musepi.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter())))}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			clk := clock.NewVirtual(start)
			rt, err := musepi.NewRuntime(append(tc.opts(), musepi.WithClock(clk), musepi.WithProvider("p", &flaky{}),
				musepi.WithJitterSource(func() retry.Source { return nominal{} }))...)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = rt.Shutdown(context.Background()) }()
			ctx := context.Background()
			s, err := rt.NewSession(ctx, musepi.WithModel("p/m"))
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				gen := s.Generation()
				go func() {
					_, err := s.Prompt(ctx, "hi")
					done <- err
				}()
				for s.Generation() == gen { // until the session has taken the prompt
					runtime.Gosched()
				}
				if err := clk.RunUntilIdle(ctx); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Under a storm, the counters stay exact: 1,000 sessions prompt into a
// 10 s outage (virtual time) with metrics on; every failed call is one
// retry attempt, every prompt is answered, and the telemetry subscriber
// loses no event.
func TestMetricsExactUnderStorm(t *testing.T) {
	const n = 1000
	clk := clock.NewVirtual(start)
	p := &outageProvider{clk: clk, end: start.Add(10 * time.Second)}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	rt, err := musepi.NewRuntime(musepi.WithClock(clk), musepi.WithProvider("p", p),
		musepi.WithRetrySettings(noFallback()), musepi.WithSeed(7), musepi.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()
	ctx := context.Background()
	h := &harness{t: t, clk: clk}
	results := make([]<-chan result, n)
	for i := range n {
		s, err := rt.NewSession(ctx, musepi.WithModel("p/m"), musepi.WithSessionID(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		results[i] = h.prompt(s, "hi")
	}
	h.runWithin(time.Minute)
	for _, ch := range results {
		if r := h.settle(ch); r.err != nil {
			t.Fatal(r.err)
		}
	}
	failed := p.inOutage.Load()
	expectLines(t, metricLines(t, reader, "musepi.retry.attempts", "musepi.retry.chains", "musepi.prompts",
		"musepi.provider.request.errors", "musepi.telemetry.events_lost"),
		fmt.Sprintf("musepi.prompts outcome=success = %d", n),
		fmt.Sprintf("musepi.provider.request.errors model=m provider=p status=503 = %d", failed),
		fmt.Sprintf("musepi.retry.attempts class=transient model=m provider=p = %d", failed),
		fmt.Sprintf("musepi.retry.chains outcome=success = %d", n),
	)
}

// overloadKeys are the attempt span attributes the limiter's test reads.
var overloadKeys = []string{"musepi.attempt", "musepi.provider", "http.response.status_code", "musepi.decision", "musepi.concurrency_limit"}

// waitVirtual waits for d of clk's time, as a call waits for the
// network: not as work in flight on clk, so that time moves meanwhile.
// It is called from work clk counts (a provider call).
func waitVirtual(clk *clock.Virtual, d time.Duration) {
	done := make(chan struct{})
	clk.AfterFunc(d, func() {
		clk.Begin() // work again, before the clock can find itself idle
		close(done)
	})
	clk.End()
	<-done
}

// With the overload limiter on, the metrics follow each model's limit and
// calls in flight, and how long queued turns waited for a place; each
// attempt span carries the limit its call went out under. Session a's
// call holds one of 4 places for 10 s; b's call, the second in flight, is
// overloaded (529): the limit falls to 1 (0.9 of 2), so b's retry queues
// behind a until a's answer raises the limit to 2; b's answer raises it
// to 3.
func TestMetricsOfTheOverloadLimiter(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h, reader := meteredHarness(t, []musepi.Credential{{Name: "A", APIKey: "key-a"}}, musepi.WithPacing(false),
		musepi.WithRetrySettings(noFallback()), musepi.WithOverloadLimiter(overload.Settings{Max: 4}), musepi.WithTracerProvider(tp))
	h.p.SetScript("a", answer("slow"))
	h.p.OnCall(func(req provider.Request) {
		if req.SessionID == "a" {
			waitVirtual(h.clk, 10*time.Second)
		}
	})
	figures := func() []string {
		return metricLines(t, reader, "musepi.concurrency.limit", "musepi.concurrency.inflight", "musepi.capacity.wait")
	}
	a, _ := h.session(musepi.WithSessionID("a"))
	chA := h.prompt(a, "holds a place for 10 s")
	waitFor(t, "a's call", func() bool { return len(h.p.Calls()) == 1 })
	expectLines(t, figures(), "musepi.concurrency.inflight model=m provider=p = 1", "musepi.concurrency.limit model=m provider=p = 4")

	h.p.SetScript("b", overloaded, answer("ok"))
	b, rec := h.session(musepi.WithSessionID("b"), musepi.WithPriority(musepi.High))
	chB := h.prompt(b, "overloaded, then queued")
	waitFor(t, "b's retry", func() bool { return rec.count("auto_retry_start") == 1 })
	expectLines(t, figures(), "musepi.concurrency.inflight model=m provider=p = 1", "musepi.concurrency.limit model=m provider=p = 1")
	h.advance(2 * time.Second) // past b's backoff: it queues
	if n := rec.count("capacity_wait"); n != 1 {
		t.Fatalf("%d capacity_wait events; want b's retry queued", n)
	}
	h.run()
	expectAnswer(t, h.settle(chA), "slow")
	expectAnswer(t, h.settle(chB), "ok")
	// b waited from 501 ms (its 500 ms backoff and the continue's 1 ms) to 10 s.
	expectLines(t, figures(),
		"musepi.capacity.wait priority=high provider=p = count=1 sum=9.499",
		"musepi.concurrency.inflight model=m provider=p = 0",
		"musepi.concurrency.limit model=m provider=p = 3")

	var lines []string
	for _, sp := range exp.GetSpans() {
		if sp.Name == "musepi.attempt" {
			lines = append(lines, spanLine(sp, overloadKeys...))
		}
	}
	sort.Strings(lines)
	expectLines(t, lines,
		"musepi.attempt musepi.attempt=0 musepi.provider=p http.response.status_code=529 musepi.decision=retry musepi.concurrency_limit=4 status=error",
		"musepi.attempt musepi.attempt=0 musepi.provider=p musepi.decision=success musepi.concurrency_limit=4",
		"musepi.attempt musepi.attempt=1 musepi.provider=p musepi.decision=success musepi.concurrency_limit=2",
	)
}

// Without the limiter there are no such figures, and no attempt carries a
// limit.
func TestNoOverloadFiguresWithoutTheLimiter(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h, reader := meteredHarness(t, []musepi.Credential{{Name: "A", APIKey: "key-a"}}, musepi.WithTracerProvider(tp))
	s, _ := h.session()
	h.p.SetScript(s.ID(), answer("ok"))
	expectAnswer(t, h.runPrompt(s, "hi"), "ok")
	if got := metricLines(t, reader, "musepi.concurrency.limit", "musepi.concurrency.inflight", "musepi.capacity.wait"); len(got) != 0 {
		t.Errorf("the limiter's metrics without it: %q", got)
	}
	for _, sp := range exp.GetSpans() {
		if line := spanLine(sp, "musepi.concurrency_limit"); strings.Contains(line, "=") {
			t.Errorf("a span carries a limit without the limiter: %s", line)
		}
	}
}
