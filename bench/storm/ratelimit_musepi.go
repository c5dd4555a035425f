package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/provider"
)

// rlMusePi is MusePi in the ratelimit scenario: one runtime (or a
// cluster's nodes) with the storm provider on the two keys, one session
// per storm session at its priority, each prompt sent with PromptAsync
// when the one before it answered.
type rlMusePi struct {
	run     *rlRun
	pacing  bool
	nodes   int  // cluster mode: the nodes (0: one runtime)
	limiter bool // the overload limiter on (WithOverloadLimiter), its limit sampled

	rts      []*musepi.Runtime
	cluster  *stormCluster
	sessions []*musepi.Session
	unsubs   []func()
	mu       sync.Mutex
	timers   []*time.Timer // the starts of a ramp

	waits         atomic.Int64 // rate_limit_wait events
	switches      atomic.Int64 // credential_switch events with reason pacing
	capacityWaits atomic.Int64 // capacity_wait events
	limits        *limitSampler
}

// runRLMusePi runs MusePi with pacing on or off against a fresh fake
// server; with nodes > 0, as a cluster of that many nodes.
func runRLMusePi(ctx context.Context, e *rlEnv, pacing bool, nodes int) (System, error) {
	name, desc := "musepi", "MusePi runtime, one session per storm session at its priority, PromptAsync"
	if nodes > 0 {
		name = fmt.Sprintf("musepi-cluster-%d", nodes)
		desc = fmt.Sprintf("MusePi in cluster mode: %d nodes in this process (gRPC remote over loopback, PostgreSQL store) sharing the keys' credentials actor, session handles spread over them", nodes)
	}
	if pacing {
		name, desc = name+"-pacing-on", desc+", pacing on ("+e.limitsSource()+")"
	} else {
		name, desc = name+"-pacing-off", desc+", pacing off (WithPacing(false))"
	}
	return runRateLimitContender(ctx, e, name, desc, pacing, func(run *rlRun) rlContender {
		return &rlMusePi{run: run, pacing: pacing, nodes: nodes}
	})
}

// runOverloadMusePi runs MusePi in the overload scenario, its overload
// limiter on or off, against a fresh fake server; with nodes > 0, as a
// cluster of that many nodes, each with its own limiter. With the
// limiter, the System has each node's limit over the run.
func runOverloadMusePi(ctx context.Context, e *rlEnv, limiter bool, nodes int) (System, error) {
	name, desc := ovLimiterOff, "MusePi runtime, one session per storm session at its priority, PromptAsync, pacing off, the overload limiter off (each session backs off on its own)"
	switch {
	case nodes > 0:
		name = ovLimiterCluster
		desc = fmt.Sprintf("MusePi in cluster mode: %d nodes in this process (gRPC remote over loopback, PostgreSQL store), session handles spread over them and sessions hosted where the cluster places them, pacing off, the overload limiter on in each node (WithOverloadLimiter, its defaults; each node its own limit)", nodes)
	case limiter:
		name, desc = ovLimiterOn, "MusePi runtime, one session per storm session at its priority, PromptAsync, pacing off, the overload limiter on (WithOverloadLimiter, its defaults)"
	}
	var m *rlMusePi
	s, err := runRateLimitContender(ctx, e, name, desc, false, func(run *rlRun) rlContender {
		m = &rlMusePi{run: run, limiter: limiter, nodes: nodes}
		return m
	})
	if err == nil && limiter {
		s.Limits = limitTimeline(m.limits.samples())
	}
	return s, err
}

// limitsSource says where MusePi's pacing takes the keys' limits from.
func (e *rlEnv) limitsSource() string {
	if e.configured {
		return "the keys' limits configured (Credential.RateLimits), corrected by the response headers"
	}
	return "limits learnt from the response headers only"
}

// options are a runtime's (each node's) options on prov.
func (m *rlMusePi) options(prov provider.Provider) []musepi.Option {
	e := m.run.e
	creds := make([]musepi.Credential, len(e.sc.Keys))
	for i, k := range e.sc.Keys {
		creds[i] = musepi.Credential{Name: k, APIKey: k}
		if m.pacing && e.configured {
			creds[i].RateLimits = musepi.RateLimits{RPM: e.sc.RPM, TPM: e.sc.TPM, InputTPM: e.sc.ITPM, OutputTPM: e.sc.OTPM}
		}
	}
	opts := []musepi.Option{
		musepi.WithLogger(slog.New(slog.DiscardHandler)),
		musepi.WithProvider(stormProvider, prov, creds...),
		musepi.WithRetrySettings(e.settings),
		musepi.WithSeed(e.seed),
		musepi.WithLimits(musepi.Limits{}),
		musepi.WithPassivateAfter(e.passivate),
		musepi.WithPacing(m.pacing),
	}
	if m.limiter {
		opts = append(opts, musepi.WithOverloadLimiter(overload.Settings{}))
	}
	return opts
}

// setup starts the runtime (or the cluster's nodes), the sessions and
// the event counts.
func (m *rlMusePi) setup(ctx context.Context) error {
	sc := m.run.e.sc
	if m.nodes > 0 {
		c, err := startStormCluster(ctx, m.run.e.db, m.nodes, m.run.prov, sc.Sessions, m.options)
		if err != nil {
			return err
		}
		m.cluster, m.rts = c, c.nodes
	} else {
		rt, err := musepi.NewRuntime(m.options(m.run.prov)...)
		if err != nil {
			return err
		}
		m.rts = []*musepi.Runtime{rt}
	}
	for _, rt := range m.rts {
		m.unsubs = append(m.unsubs, rt.Subscribe(m.count))
	}
	m.sessions = make([]*musepi.Session, sc.Sessions)
	for i := range m.sessions {
		priority := musepi.Low
		if sc.high(i) {
			priority = musepi.High
		}
		s, err := m.rts[i%len(m.rts)].NewSession(ctx, musepi.WithSessionID(strconv.Itoa(i)),
			musepi.WithModel(stormProvider+"/"+rlModel), musepi.WithPriority(priority))
		if err != nil {
			return err
		}
		m.sessions[i] = s
	}
	return nil
}

// count counts the pacing events: waits, and key switches for pacing.
func (m *rlMusePi) count(ev musepi.Event) {
	switch ev := ev.(type) {
	case musepi.RateLimitWait:
		m.waits.Add(1)
		session, _ := strconv.Atoi(ev.SessionID)
		m.run.rec.wait(ev.Time, session, ev.Credential)
	case musepi.CredentialSwitch:
		if ev.Reason == "pacing" {
			m.switches.Add(1)
		}
	case musepi.CapacityWait:
		m.capacityWaits.Add(1)
	}
}

// launch sends each session's first prompt at its start.
func (m *rlMusePi) launch(ctx context.Context) {
	sc := m.run.e.sc
	if m.limiter {
		m.limits = sampleLimits(m.rts, stormProvider+"/"+rlModel, limitPeriod)
	}
	for i := range sc.Sessions {
		d := sc.startAt(i)
		if d <= 0 {
			m.send(ctx, i, 0)
			continue
		}
		m.mu.Lock()
		m.timers = append(m.timers, time.AfterFunc(d, func() { m.send(ctx, i, 0) }))
		m.mu.Unlock()
	}
}

// send sends session i's prompt j; its answer sends prompt j+1.
func (m *rlMusePi) send(ctx context.Context, i, j int) {
	sc, rec := m.run.e.sc, m.run.rec
	rec.begin(i, j)
	m.sessions[i].PromptAsync(ctx, sc.promptText(i, j), func(msg *musepi.AssistantMessage, err error) {
		if ctx.Err() != nil {
			return // stopped: the prompt never ended
		}
		var input, output int64
		if err == nil && msg != nil && msg.Usage != nil {
			input, output = msg.Usage.Input, msg.Usage.Output
		}
		rec.finish(i, j, err == nil, input, output)
		if j+1 < sc.Prompts {
			m.send(ctx, i, j+1)
		}
	})
}

// counts are the pacing and capacity events counted, and with the
// limiter the figures of its limit over the run.
func (m *rlMusePi) counts() map[string]float64 {
	f := map[string]float64{
		"rate_limit_waits":           float64(m.waits.Load()),
		"credential_switches_pacing": float64(m.switches.Load()),
	}
	if m.limiter {
		f["capacity_waits"] = float64(m.capacityWaits.Load())
		if c := m.run.e.sc.Capacity; c != nil {
			samples := m.limits.samples()
			maps.Copy(f, limitFigures(c, samples))
			maps.Copy(f, convergenceFigures(c, samples))
		}
	}
	return f
}

// close stops the starts to come and shuts the runtime (or the nodes)
// down.
func (m *rlMusePi) close() error {
	m.mu.Lock()
	for _, t := range m.timers {
		t.Stop()
	}
	m.timers = nil
	m.mu.Unlock()
	m.limits.stop()
	for _, unsub := range m.unsubs {
		unsub()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if m.cluster != nil {
		return m.cluster.close(ctx)
	}
	if len(m.rts) == 1 {
		return m.rts[0].Shutdown(ctx)
	}
	return nil
}
