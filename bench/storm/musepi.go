package main

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// stormProvider is the name MusePi's runtime knows the storm provider by.
const stormProvider = "storm"

// musepiRun is MusePi as a contender: one runtime, one session per storm
// session, each prompt sent with PromptAsync (no goroutine waits on it).
type musepiRun struct {
	e      *env
	clk    clock.Clock // the runtime's (measuring lateness in real mode)
	starts clock.Clock // the run's, for the prompts' start timers
	prov   *countingProvider
	rec    *recorder
	budget bool
	nodes  int // cluster mode: the nodes (0: one runtime)

	rt        *musepi.Runtime // the node whose budget is read, in cluster mode
	cluster   *stormCluster   // in cluster mode
	sessions  []*musepi.Session
	counted   *countingClock // the runtime's clock, counting protocol messages
	starter   starter
	completed atomic.Int64
	failed    atomic.Int64

	failuresMu sync.Mutex
	failures   map[string]int // failed prompts by error
}

// runMusePi runs MusePi on a fresh run of e, with the retry budget on or
// off; with nodes > 0, as a cluster of that many nodes.
func runMusePi(ctx context.Context, e *env, budget bool, nodes int) (System, error) {
	clk, prov, rec, cleanup, err := e.newRun()
	if err != nil {
		return System{}, err
	}
	start := clk.Now()
	w := &waves{}
	starts := clk // the starts' timers are not backoffs: not measured
	cp := &countingProvider{Provider: prov, clk: clk, start: start, waves: w, scenario: e.scenario,
		sessions: make([]sessionRequests, e.sessions)}
	if e.mode == "real" {
		clk = &latenessClock{rec: rec, firstWaveEnd: start.Add(e.settings.BaseDelay * 3 / 4)}
	}
	name, desc := "musepi", "MusePi runtime: session actor per session, one timer service, PromptAsync"
	if e.budgetCompared {
		if budget {
			name, desc = "musepi-budget-on", desc+", retry budget on"
		} else {
			name, desc = "musepi-budget-off", desc+", retry budget off"
		}
	}
	if nodes > 0 {
		name = fmt.Sprintf("musepi-cluster-%d", nodes)
		desc = fmt.Sprintf("MusePi in cluster mode: %d nodes in this process (gRPC remote over loopback, automanaged membership, PostgreSQL store), session handles spread over them; the last node leaves at mid-outage", nodes)
		if e.budgetCompared {
			name += map[bool]string{true: "-budget-on", false: "-budget-off"}[budget]
		}
	}
	r := &musepiRun{e: e, clk: clk, starts: starts, prov: cp, rec: rec, budget: budget, nodes: nodes}
	restart := func(now time.Time) error {
		cp.start = now
		if lc, ok := r.clk.(*latenessClock); ok {
			lc.firstWaveEnd = now.Add(e.settings.BaseDelay * 3 / 4)
		}
		return restartScenario(prov, rec, now)
	}
	sys, err := drive(ctx, e, name, desc, measured{clk: clk, rec: rec, waves: w, cleanup: cleanup, restart: restart}, r)
	sys.Notes = r.failureNotes(name)
	return sys, err
}

// options are the runtime's options (each node's, in cluster mode) on prov.
func (r *musepiRun) options(prov provider.Provider) []musepi.Option {
	settings := r.e.settings
	settings.Budget.Enabled = r.budget
	opts := []musepi.Option{
		musepi.WithLogger(slog.New(slog.DiscardHandler)),
		musepi.WithProvider(stormProvider, prov,
			musepi.Credential{Name: limitedKey, APIKey: limitedKey},
			musepi.Credential{Name: freeKey, APIKey: freeKey}),
		musepi.WithRetrySettings(settings),
		musepi.WithSeed(r.e.seed),
		musepi.WithLimits(musepi.Limits{}),
		musepi.WithPassivateAfter(r.e.passivate),
	}
	if r.nodes == 0 { // cluster mode runs on the wall clock
		opts = append(opts, musepi.WithClock(r.counted))
	}
	return opts
}

// setup starts the runtime (or the cluster's nodes) and the sessions.
func (r *musepiRun) setup(ctx context.Context) error {
	r.counted = &countingClock{Clock: r.clk}
	node := func(int) *musepi.Runtime { return r.rt }
	if r.nodes > 0 {
		c, err := startStormCluster(ctx, r.e.db, r.nodes, r.prov, r.e.sessions, r.options)
		if err != nil {
			return err
		}
		r.cluster, r.rt, node = c, c.nodes[0], c.handle
	} else {
		rt, err := musepi.NewRuntime(r.options(r.prov)...)
		if err != nil {
			return err
		}
		r.rt = rt
	}
	sessions := make([]*musepi.Session, r.e.sessions)
	for i := range sessions {
		s, err := node(i).NewSession(ctx, musepi.WithSessionID(fmt.Sprint(i)),
			musepi.WithModel(stormProvider+"/"+model(r.e.scenario.kindOf(i))))
		if err != nil {
			return err
		}
		sessions[i] = s
	}
	r.sessions = sessions
	return nil
}

// midOutage makes a cluster's last node leave.
func (r *musepiRun) midOutage() {
	if r.cluster != nil {
		r.cluster.leaveLast()
	}
}

// launch sends every session's prompt.
func (r *musepiRun) launch(ctx context.Context) error {
	sessions := r.sessions
	r.starter.launch(r.starts, r.e.scenario, r.e.sessions, func(i int) {
		sessions[i].PromptAsync(ctx, "Hello from session "+strconv.Itoa(i), func(_ *musepi.AssistantMessage, err error) {
			if err != nil {
				r.failed.Add(1)
				r.noteFailure(err)
				return
			}
			r.rec.completion(r.clk.Now())
			r.completed.Add(1)
		})
	})
	return nil
}

// noteFailure counts a failed prompt's error by its text (session ids
// and numbers left in), for the run's notes.
func (r *musepiRun) noteFailure(err error) {
	r.failuresMu.Lock()
	defer r.failuresMu.Unlock()
	if r.failures == nil {
		r.failures = map[string]int{}
	}
	r.failures[digits.ReplaceAllString(err.Error(), "N")]++
}

// digits are the numbers in an error text (session ids, attempts).
var digits = regexp.MustCompile(`[0-9]+`)

// failureNotes lists the failed prompts' errors, most frequent first.
func (r *musepiRun) failureNotes(name string) []string {
	r.failuresMu.Lock()
	defer r.failuresMu.Unlock()
	var out []string
	for text, n := range r.failures {
		out = append(out, fmt.Sprintf("%s: %d prompts failed with %q", name, n, text))
	}
	slices.Sort(out)
	return out
}

func (r *musepiRun) finished() int { return int(r.completed.Load() + r.failed.Load()) }

// counts adds the budget's own figure when it is on.
func (r *musepiRun) counts() runCounts {
	n := runCounts{completed: int(r.completed.Load()), failed: int(r.failed.Load()), requests: int(r.prov.requests.Load()),
		extra: map[string]float64{}}
	if r.cluster != nil {
		r.cluster.figures(n.extra)
	} else if retries := n.requests - r.e.sessions; retries > 0 && r.counted != nil {
		// Every protocol message is one Begin on the clock, and so is each
		// turn's stream goroutine: the messages of the run, over its retries.
		msgs := r.counted.begins.Load() - int64(n.requests)
		n.extra["messages_per_attempt"] = float64(msgs) / float64(retries)
	}
	if r.budget && r.rt != nil {
		if st, err := r.rt.RetryBudget(context.Background(), stormProvider); err == nil {
			n.extra["budget_extended_retries"] = float64(st.Delayed)
		}
	}
	return n
}

// countingClock counts the work units begun on a clock: each protocol
// message sent to an actor, and each turn's stream goroutine.
type countingClock struct {
	clock.Clock
	begins atomic.Int64
}

// Begin counts, then begins on the clock.
func (c *countingClock) Begin() {
	c.begins.Add(1)
	c.Clock.Begin()
}

// close shuts the runtime down.
func (r *musepiRun) close() error {
	r.starter.cancel()
	if r.rt == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if r.cluster != nil {
		return r.cluster.close(ctx)
	}
	return r.rt.Shutdown(ctx)
}

// countingProvider counts the requests MusePi sends and files each
// session's n-th retry in waves. Sessions with hinted errors are left out
// (their retries follow the hint), and so are sessions that met a usage
// limit (their first retry follows the credential switch at once).
type countingProvider struct {
	provider.Provider
	clk      clock.Clock
	start    time.Time
	waves    *waves
	scenario *Scenario
	requests atomic.Int64

	mu       sync.Mutex
	sessions []sessionRequests // by session number (its id)
}

// sessionRequests is what the harness tracks of one session's requests.
type sessionRequests struct {
	sent     int32 // requests
	switched bool  // it met a usage limit
}

// Stream counts the request, then asks the scenario's provider.
func (p *countingProvider) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta)) *messages.AssistantMessage {
	p.requests.Add(1)
	i, err := strconv.Atoi(req.SessionID)
	if err != nil || i < 0 || i >= len(p.sessions) {
		panic(fmt.Sprintf("storm: request of unknown session %q", req.SessionID))
	}
	p.mu.Lock()
	sr := &p.sessions[i]
	n := int(sr.sent)
	sr.sent++
	if p.scenario.UsageLimit && req.APIKey == limitedKey {
		sr.switched = true
	}
	switched := sr.switched
	p.mu.Unlock()
	if k := errorKinds[strings.TrimPrefix(req.Model, "m-")]; n > 0 && len(k.headers) == 0 && !switched {
		p.waves.add(n, p.clk.Now().Sub(p.start))
	}
	return p.Provider.Stream(ctx, req, onDelta)
}

// latenessClock is the wall clock measuring how late each timer of the
// runtime wakes: from its deadline to its callback. The backoffs wait in
// the timer service's shards, each under a timer armed for its earliest
// (whose lateness it so measures), and the stream watchdog adds a check
// now and then.
type latenessClock struct {
	clock.Real
	rec          *recorder
	firstWaveEnd time.Time // timers armed before it belong to the first wave
}

// AfterFunc arms a wall-clock timer, measuring its lateness.
func (c *latenessClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &latenessTimer{c: c}
	t.arm(d)
	t.Timer = time.AfterFunc(d, func() {
		due, first := t.deadline()
		c.rec.lateness(time.Since(due), first)
		f()
	})
	return t
}

// latenessTimer is a timer of latenessClock: its deadline moves with each
// Reset.
type latenessTimer struct {
	*time.Timer
	c     *latenessClock
	mu    sync.Mutex
	due   time.Time
	first bool // armed in the first wave
}

// arm records the deadline of a timer armed now for d.
func (t *latenessTimer) arm(d time.Duration) {
	now := time.Now()
	t.mu.Lock()
	t.due, t.first = now.Add(d), now.Before(t.c.firstWaveEnd)
	t.mu.Unlock()
}

// deadline is when the timer is due, and whether it was armed in the
// first wave.
func (t *latenessTimer) deadline() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.due, t.first
}

// Reset moves the deadline, then the timer.
func (t *latenessTimer) Reset(d time.Duration) bool {
	t.arm(d)
	return t.Timer.Reset(d)
}
