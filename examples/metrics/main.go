// Command metrics runs a small team of MusePi sessions against the
// embedded fake LLM server, with the runtime's metrics on a Prometheus
// /metrics endpoint: the OpenTelemetry SDK's meter provider, read by its
// Prometheus exporter, given to the runtime with musepi.WithMeterProvider.
//
//	go run ./examples/metrics                  # prints the metrics at the end
//	go run ./examples/metrics -hold 1m         # and serves them for a minute:
//	curl -s http://127.0.0.1:9464/metrics | grep -E '^(musepi|gen_ai)_'
//
// The fake server puts key A over its quota (the sessions on it switch to
// key B) and answers the first two requests on key B with a 503 (retried
// after a backoff).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/provider/openai"
	"github.com/musepi/musepi/retry"
)

const scenario = `{"rules":[
 {"name":"key A over its quota","match":{"key":"key-a"},"respond":{"preset":"quota"}},
 {"name":"two 503s","match":{"key":"key-b","first":2},"respond":{"preset":"unavailable"}}],
 "default":{"text":"Done."}}`

// team is how many sessions prompt at once.
const team = 3

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "serve /metrics on this address (port 0 picks a free one)")
	hold := flag.Duration("hold", 0, "keep serving /metrics this long after the prompts")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *hold, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// run serves /metrics on addr, runs the team's prompts, serves for hold
// more, then prints MusePi's metrics as Prometheus scraped them.
func run(ctx context.Context, addr string, hold time.Duration, out io.Writer) error {
	sc, err := fakellm.ParseScenario([]byte(scenario))
	if err != nil {
		return err
	}
	llm := fakellm.New(sc)
	base, err := llm.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer llm.Close()

	// The OpenTelemetry side: a meter provider whose reader is the
	// Prometheus exporter, registered on a registry served on /metrics.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return err
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer meters.Shutdown(context.Background())
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/metrics"
	fmt.Fprintf(out, "metrics on %s\n", url)

	// The MusePi side: one option.
	settings := retry.DefaultSettings()
	settings.BaseDelay = 50 * time.Millisecond
	rt, err := musepi.NewRuntime(
		musepi.WithProvider("demo", openai.New(openai.Config{BaseURL: base + "/v1"}),
			musepi.Credential{Name: "A", APIKey: "key-a"}, musepi.Credential{Name: "B", APIKey: "key-b"}),
		musepi.WithRetrySettings(settings),
		musepi.WithMeterProvider(meters),
	)
	if err != nil {
		return err
	}
	if err := prompts(ctx, rt); err != nil {
		_ = rt.Shutdown(context.Background())
		return err
	}
	if hold > 0 {
		fmt.Fprintf(out, "serving %s for %s\n", url, hold)
		select {
		case <-time.After(hold):
		case <-ctx.Done():
		}
	}
	// Shutdown lets the metrics take the sessions' last events.
	if err := rt.Shutdown(context.Background()); err != nil {
		return err
	}
	return printMetrics(url, out)
}

// prompts sends one prompt on each session of the team, at once.
func prompts(ctx context.Context, rt *musepi.Runtime) error {
	var wg sync.WaitGroup
	errs := make([]error, team)
	for i := range team {
		s, err := rt.NewSession(ctx, musepi.WithModel("demo/m1"))
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Prompt(ctx, fmt.Sprintf("task %d", i+1))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// printMetrics scrapes url and prints MusePi's samples, its own and the
// OpenTelemetry GenAI ones (no histogram buckets).
func printMetrics(url string, out io.Writer) error {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		ours := strings.HasPrefix(line, "musepi_") || strings.HasPrefix(line, "gen_ai_")
		if ours && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	return lines.Err()
}
