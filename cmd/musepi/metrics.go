package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/musepi/musepi"
)

// metricsCardinalityLimit bounds the label sets of one instrument: labels
// are providers, models, roles, classes and statuses from the
// configuration, so reaching it means a client switched among unusually
// many models; the excess is reported under otel_metric_overflow="true".
const metricsCardinalityLimit = 2000

// metricsServer serves the runtime's metrics for Prometheus on /metrics.
type metricsServer struct {
	meter *sdkmetric.MeterProvider
	mux   *http.ServeMux
	srv   *http.Server
	addr  net.Addr
	done  chan struct{}
}

// startMetrics listens on addr (host:port; port 0 picks a free one) and
// serves /metrics: MusePi's metrics (musepi_*, gen_ai_client_*), the Go
// runtime's and the process's. The runtime records them once given
// option().
func startMetrics(addr string) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	if err := errors.Join(reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))); err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: prometheus exporter: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &metricsServer{
		meter: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithCardinalityLimit(metricsCardinalityLimit),
			sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", "musepi")))),
		mux:  mux,
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		addr: ln.Addr(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(m.done)
		_ = m.srv.Serve(ln) // ends with http.ErrServerClosed on close
	}()
	return m, nil
}

// serveMetrics is the --metrics-addr flag of command cmd ("musepi node"):
// it starts serving metrics on addr and says where on stderr, warning when
// addr has no host (":9465"), which listens on every interface.
func serveMetrics(cmd, addr string) (*metricsServer, error) {
	m, err := startMetrics(addr)
	if err != nil {
		return nil, err
	}
	if w := metricsAddrWarning(addr); w != "" {
		fmt.Fprintf(stderr, "%s: %s\n", cmd, w)
	}
	fmt.Fprintf(stderr, "%s: metrics on %s\n", cmd, m.URL())
	return m, nil
}

// metricsAddrWarning is the warning for a --metrics-addr without a host,
// which listens on every interface ("" for an address with one).
func metricsAddrWarning(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "" {
		return ""
	}
	return fmt.Sprintf("--metrics-addr %s listens on every interface; give a host such as 127.0.0.1:%s to keep it local", addr, port)
}

// option gives the runtime the meter provider /metrics reads.
func (m *metricsServer) option() musepi.Option { return musepi.WithMeterProvider(m.meter) }

// handle serves h on pattern too.
func (m *metricsServer) handle(pattern string, h http.Handler) { m.mux.Handle(pattern, h) }

// URL is where the metrics are served.
func (m *metricsServer) URL() string { return "http://" + m.addr.String() + "/metrics" }

// close stops serving (scrapes in progress get until ctx ends) and the
// meter provider.
func (m *metricsServer) close(ctx context.Context) error {
	err := m.srv.Shutdown(ctx)
	<-m.done
	return errors.Join(err, m.meter.Shutdown(ctx))
}
