package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/anthropic"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/provider/openai"
	"github.com/musepi/musepi/retry"
)

// rlEnv is what the contenders of one ratelimit run share.
type rlEnv struct {
	sc        *rateLimitScenario
	settings  retry.Settings
	seed      uint64
	passivate time.Duration
	// configured: MusePi with pacing on is given the keys' limits
	// (Credential.RateLimits); otherwise it learns them from the headers.
	configured bool
	timeout    time.Duration // a contender's run is stopped after it
	nodes      int
	database   string
	db         *clusterDB // started for the first cluster contender
	progress   func(label string, total int) *progress
}

// rlServer is a contender's fake server: fakellm in this process on a
// loopback port behind a counting front (rlFront), fresh (its buckets
// full), and the HTTP client to it.
type rlServer struct {
	srv    *fakellm.Server
	hs     *http.Server
	served chan struct{} // closed once hs stopped serving
	base   string
	client *http.Client
}

// startRLServer starts a fake server for sc, its front recording into
// rec.
func startRLServer(sc *rateLimitScenario, rec *rlRecorder) (*rlServer, error) {
	fsc := sc.fakellm()
	if err := fsc.Validate(); err != nil {
		return nil, fmt.Errorf("fakellm scenario: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start fakellm: %w", err)
	}
	srv := fakellm.New(fsc)
	s := &rlServer{srv: srv, served: make(chan struct{}), base: "http://" + ln.Addr().String(),
		hs: &http.Server{Handler: &rlFront{next: srv, rec: rec}, ReadHeaderTimeout: 30 * time.Second}}
	go func() {
		defer close(s.served)
		_ = s.hs.Serve(ln)
	}()
	tr := &http.Transport{MaxIdleConns: 2048, MaxIdleConnsPerHost: 2048, MaxConnsPerHost: 2048, IdleConnTimeout: time.Minute}
	s.client = &http.Client{Transport: tr}
	return s, nil
}

// provider is MusePi's adapter of sc's wire against the server, sending
// sc's max_tokens: the OpenAI one (the official SDK, Chat Completions) or
// the Anthropic one (the official SDK, Messages).
func (s *rlServer) provider(sc *rateLimitScenario) provider.Provider {
	if sc.Wire == "anthropic" {
		return anthropic.New(anthropic.Config{BaseURL: s.base, HTTPClient: s.client, MaxTokens: sc.MaxTokens})
	}
	return openai.New(openai.Config{BaseURL: s.base + "/v1", API: openai.APIChat, HTTPClient: s.client, MaxTokens: sc.MaxTokens})
}

// close stops the server, its front and the client's connections.
func (s *rlServer) close() {
	s.client.CloseIdleConnections()
	_ = s.srv.Close()
	_ = s.hs.Close()
	<-s.served
}

// rlFront is the counting front of a contender's fake server: it records
// every API request reaching the server (when it arrived, its key, and
// whether the server refused it with a 429) and hands it on.
type rlFront struct {
	next http.Handler
	rec  *rlRecorder
}

// ServeHTTP hands r to the server and records it once answered.
func (f *rlFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	f.next.ServeHTTP(sw, r)
	if key := requestKey(r); key != "" {
		f.rec.arrival(at, key, sw.status == http.StatusTooManyRequests)
	}
}

// requestKey is the API key r carries: Anthropic's x-api-key, or
// OpenAI's bearer token.
func requestKey(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// statusWriter remembers the status of the response it writes.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

// WriteHeader records the first status written.
func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap is the writer underneath, for http.ResponseController (the
// server flushes its streams and may cut connections).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// rlProvider records each request of a contender and whether a 429
// refused it. It keeps the adapter's output bound, which MusePi's pacing
// reserves (provider.OutputBounded), and its refund rule
// (provider.OutputRefunder): a wrapper that hid it made pacing keep
// Anthropic's max_tokens as if never given back.
type rlProvider struct {
	provider.Provider
	rec *rlRecorder
}

// Stream streams the request, then records it.
func (p *rlProvider) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta)) *messages.AssistantMessage {
	at := time.Now()
	msg := p.Provider.Stream(ctx, req, onDelta)
	session, _ := strconv.Atoi(req.SessionID)
	p.rec.request(at, session, req.APIKey, msg.GetHttpStatus() == http.StatusTooManyRequests)
	return msg
}

// MaxOutputTokens is the adapter's.
func (p *rlProvider) MaxOutputTokens() int64 {
	if b, ok := p.Provider.(provider.OutputBounded); ok {
		return b.MaxOutputTokens()
	}
	return 0
}

// RefundsUnusedOutput is the adapter's.
func (p *rlProvider) RefundsUnusedOutput() bool {
	r, ok := p.Provider.(provider.OutputRefunder)
	return ok && r.RefundsUnusedOutput()
}

// rlRun is one contender's run: its recorder and its provider.
type rlRun struct {
	e    *rlEnv
	rec  *rlRecorder
	prov provider.Provider
}

// rlContender is one system under test in a ratelimit run.
type rlContender interface {
	// setup prepares what must exist before the first prompt.
	setup(ctx context.Context) error
	// launch starts every session (at its start); it does not wait.
	launch(ctx context.Context)
	// counts are the contender's own figures, once its prompts ended.
	counts() map[string]float64
	// close stops what launch started and returns once it all stopped.
	close() error
}

// runRateLimitContender runs one contender, made by newContender, against
// a fresh fake server, until every prompt ended or e.timeout passed, and
// returns what it measured. paced says whether its turns wait for a key
// as pacing waits (rate_limit_wait events).
func runRateLimitContender(ctx context.Context, e *rlEnv, name, desc string, paced bool, newContender func(*rlRun) rlContender) (System, error) {
	rec := newRLRecorder(e.sc)
	srv, err := startRLServer(e.sc, rec)
	if err != nil {
		return System{}, err
	}
	defer srv.close()
	run := &rlRun{e: e, rec: rec, prov: &rlProvider{Provider: srv.provider(e.sc), rec: rec}}
	c := newContender(run)
	setup0 := time.Now()
	if err := c.setup(ctx); err != nil {
		_ = c.close()
		return System{}, fmt.Errorf("%s: setup: %w", name, err)
	}
	setup := time.Since(setup0)
	srv.srv.ResetClock() // the buckets full, from now
	srv.srv.ResetStats()
	rec.restart(time.Now())
	bar := e.progress(name, e.sc.totalPrompts())
	bar.start()
	cpu0, wall0 := cpuTime(), time.Now()
	runCtx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	c.launch(runCtx)
	err = waitPrompts(runCtx, rec, e.sc.totalPrompts(), bar)
	cpu, wall := cpuTime()-cpu0, time.Since(wall0)
	bar.set(int(rec.finished.Load()))
	bar.stop()
	timedOut := err != nil && ctx.Err() == nil
	stats, extra := srv.srv.Stats(), c.counts()
	prompts, keys := rec.snapshot(), rec.keyLog(wall0.Add(wall), paced)
	cancel()
	if cerr := c.close(); err == nil && cerr != nil {
		return System{}, fmt.Errorf("%s: %w", name, cerr)
	}
	if err != nil && !timedOut {
		return System{}, fmt.Errorf("%s: %w", name, err)
	}
	f := rlFigures(e.sc, prompts, stats, rec, keys.end)
	keyFigures(f, keys)
	f["setup_seconds"], f["cpu_seconds"], f["wall_seconds"] = setup.Seconds(), cpu.Seconds(), wall.Seconds()
	return rlSystem(e, name, desc, f, extra, rec, timedOut), nil
}

// rlSystem is a contender's System: its figures f and its own, its
// timeline per second, and a note when it was stopped by the timeout.
func rlSystem(e *rlEnv, name, desc string, f, extra map[string]float64, rec *rlRecorder, timedOut bool) System {
	for k, v := range extra {
		f[k] = v
	}
	sys := System{Name: name, Description: desc, Figures: f, Timeline: rec.timeline(time.Second)}
	if timedOut {
		sys.Notes = append(sys.Notes, fmt.Sprintf("%s: stopped after -timeout %v with %s prompts unfinished (lost).",
			name, e.timeout, formatNumber(f["prompts_lost"])))
	}
	return sys
}

// waitPrompts waits until total prompts ended, updating bar; it returns
// ctx's error when ctx ends first.
func waitPrompts(ctx context.Context, rec *rlRecorder, total int, bar *progress) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for int(rec.finished.Load()) < total {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			bar.set(int(rec.finished.Load()))
		}
	}
	return nil
}

// rlFigures are a ratelimit run's figures: the server's count of
// requests and 429s (and the harness's, which should agree), and the
// prompts' (promptFigures) over the run, from its start to the last
// answer, or to its end (end, from its start) when a prompt never ended.
func rlFigures(sc *rateLimitScenario, prompts []rlPrompt, stats fakellm.Stats, rec *rlRecorder, end time.Duration) map[string]float64 {
	f := map[string]float64{
		"requests":                     float64(stats.Total),
		"http_429_responses":           float64(stats.ByStatus["429"]),
		"http_429_requests_limit":      float64(stats.ByLimit[fakellm.LimitRequests]),
		"http_429_tokens_limit":        float64(stats.ByLimit[fakellm.LimitTokens]),
		"http_429_input_tokens_limit":  float64(stats.ByLimit[fakellm.LimitInputTokens]),
		"http_429_output_tokens_limit": float64(stats.ByLimit[fakellm.LimitOutputTokens]),
		"requests_sent_harness":        float64(rec.requests.Load()),
		"http_429_responses_harness":   float64(rec.http429.Load()),
		"http_429_share":               0,
	}
	if stats.Total > 0 {
		f["http_429_share"] = float64(stats.ByStatus["429"]) / float64(stats.Total)
	}
	var last time.Duration
	for _, p := range prompts {
		switch {
		case !p.ended:
			last = max(last, end) // the keys could have answered it until the run stopped
		case p.ok:
			last = max(last, p.end)
		}
	}
	promptFigures(f, sc, prompts, last.Minutes())
	if sc.Capacity != nil {
		overloadFigures(f, sc.Capacity, prompts, stats)
	}
	if n := f["prompts_completed"]; n > 0 {
		f["requests_per_prompt"] = float64(stats.Total) / n
	}
	return f
}

// measureRateLimit runs the ratelimit scenario's contenders in order and
// reports what they measured and the targets.
func measureRateLimit(ctx context.Context, o *options, command string, stderr io.Writer) (*Combined, error) {
	e, err := newRLEnv(o, stderr)
	if err != nil {
		return nil, err
	}
	defer func() {
		if e.db != nil {
			e.db.stop()
		}
	}()
	mode := o.mode
	r := &Report{Command: command, Mode: mode, Sessions: o.sessions, GoVersion: runtime.Version(),
		CPUs: runtime.GOMAXPROCS(0), Started: time.Now(), Scenario: e.sc.String()}
	for _, c := range strings.Split(o.contenders, ",") {
		systems, err := runRLContender(ctx, e, o, c)
		if err != nil {
			return nil, err
		}
		r.Systems = append(r.Systems, systems...)
	}
	r.Ratios = rlRatios(r.Systems)
	r.Targets = checkTargets(rlTargetMode(mode), r.Systems)
	r.Notes = rlNotes(e)
	r.Elapsed = time.Since(r.Started)
	return &Combined{Command: command, Mode: "ratelimit", Started: r.Started, Runs: []*Report{r},
		Targets: r.Targets, Elapsed: r.Elapsed}, nil
}

// rlTargetMode is the targets' mode of a ratelimit run in mode.
func rlTargetMode(mode string) string {
	if mode == "cluster" {
		return "ratelimit-cluster"
	}
	return "ratelimit"
}

// newRLEnv is the env of o's ratelimit run; an error when o's retry
// settings are not valid.
func newRLEnv(o *options, stderr io.Writer) (*rlEnv, error) {
	sc := &rateLimitScenario{Sessions: o.sessions, Prompts: o.prompts, Keys: rlKeys(o.keys), RPM: o.rpm, TPM: o.tpm,
		ITPM: o.itpm, OTPM: o.otpm, Window: o.window, HighPercent: o.highPercent, MaxTokens: o.maxTokens, Ramp: o.ramp, Wire: o.wire}
	settings := retry.DefaultSettings()
	settings.MaxRetries, settings.BaseDelay, settings.MaxDelay = o.maxRetries, o.baseDelay, o.maxDelay
	settings.ModelFallback = false
	if err := settings.Validate(); err != nil {
		return nil, err
	}
	e := &rlEnv{sc: sc, settings: settings, seed: o.seed, passivate: o.passivate, configured: o.pacingLimits == "configured",
		timeout: o.timeout, nodes: o.nodes, database: o.database}
	e.progress = func(label string, total int) *progress {
		w := stderr
		if o.quiet {
			w = io.Discard
		}
		return newProgress(w, fmt.Sprintf("%-26s", label), total)
	}
	return e, nil
}

// startDB starts the database of the cluster contenders, unless it runs
// already.
func (e *rlEnv) startDB(ctx context.Context) error {
	if e.db != nil {
		return nil
	}
	db, err := startClusterDB(ctx, e.database)
	if err != nil {
		return err
	}
	e.db = db
	return nil
}

// runRLContender runs the contender named name: the peer, or MusePi once
// per pacing setting (on one runtime, or as a cluster).
func runRLContender(ctx context.Context, e *rlEnv, o *options, name string) ([]System, error) {
	switch name {
	case "peer":
		s, err := runRLPeer(ctx, e)
		return []System{s}, err
	case "musepi", "cluster":
		nodes := 0
		if name == "cluster" {
			nodes = e.nodes
			if err := e.startDB(ctx); err != nil {
				return nil, err
			}
		}
		var systems []System
		for _, on := range pacingRuns(o.pacing) {
			s, err := runRLMusePi(ctx, e, on, nodes)
			if err != nil {
				return nil, err
			}
			systems = append(systems, s)
		}
		return systems, nil
	}
	return nil, fmt.Errorf("unknown contender %q", name)
}

// pacingRuns are the pacing settings MusePi runs with: off, then on.
func pacingRuns(pacing string) []bool {
	switch pacing {
	case "on":
		return []bool{true}
	case "off":
		return []bool{false}
	}
	return []bool{false, true}
}

// rlRatios compare each MusePi system with the peer on the ratelimit
// figures.
func rlRatios(systems []System) []Ratio {
	var peer *System
	for i := range systems {
		if systems[i].Name == "peer" {
			peer = &systems[i]
		}
	}
	if peer == nil {
		return nil
	}
	var out []Ratio
	for _, m := range systems {
		if !strings.HasPrefix(m.Name, "musepi") {
			continue
		}
		out = ratiosTo(out, m, *peer, []figureLabel{
			{"http_429_responses", "429 responses"},
			{"requests", "provider requests"},
			{"p99_prompt_latency_ms", "p99 prompt latency"},
			{"p99_prompt_latency_ms_high", "p99 prompt latency, high priority"},
			{"goodput_vs_limit", "goodput vs the limit"},
		})
	}
	return out
}
