package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/fakellm"
)

// errorKind is one failure a storm session meets while the outage lasts.
type errorKind struct {
	name    string
	preset  string            // fakellm preset (real mode)
	headers map[string]string // retry hints, if any
	status  int               // virtual mode: HTTP status
	text    string            // virtual mode: error text, as the OpenAI provider reports it
}

// errorKinds are the failures a mix may name. The texts are those the
// OpenAI provider reports for fakellm's presets.
var errorKinds = map[string]errorKind{
	"429":      {name: "429", preset: "rate_limit", status: 429, text: "429 Too Many Requests: Rate limit reached for requests"},
	"429-hint": {name: "429-hint", preset: "rate_limit", headers: map[string]string{"retry-after": "2"}, status: 429, text: "429 Too Many Requests: Rate limit reached for requests"},
	"503":      {name: "503", preset: "unavailable", status: 503, text: "503 Service Unavailable: Service unavailable."},
	"overload": {name: "overload", preset: "overloaded", status: 503, text: "503 Service Unavailable: The server is overloaded or not ready yet."},
}

// usageLimit is what the limited key answers during the outage.
var usageLimit = errorKind{name: "usage-limit", preset: "usage_limit", status: 429, text: "429 Too Many Requests: The usage limit has been reached"}

// The storm provider's two API keys; limitedKey hits usage limits during
// the outage when Scenario.UsageLimit is on.
const (
	limitedKey = "key-a"
	freeKey    = "key-b"
)

// Scenario is one storm: every session sends one prompt at the start of
// the run (or, with a ramp, session i of n at Ramp·i/n); while the outage
// lasts each request fails with its session's error kind (and requests on
// the limited key with a usage limit); after it, every request succeeds.
type Scenario struct {
	OutageStart time.Duration // from the start of the run
	OutageLen   time.Duration
	Mix         []weighted    // error kinds by weight
	UsageLimit  bool          // limitedKey answers usage limits during the outage
	Ramp        time.Duration // prompts start spread over it; 0: all at once
}

// startAt is when session i of n sends its prompt.
func (sc *Scenario) startAt(i, n int) time.Duration {
	if sc.Ramp <= 0 || n <= 1 {
		return 0
	}
	return time.Duration(int64(sc.Ramp) / int64(n) * int64(i))
}

// sampleAt is when the memory of the waiting sessions is sampled:
// mid-outage, or, when the prompts are spread over a ramp that goes on
// past mid-outage, once the last prompt is sent, but no later than 90 %
// into the outage (the sample's collections take a while, and every
// session must still be waiting when they end); sampled is how many
// sessions have sent their prompt by then.
func (sc *Scenario) sampleAt(n int) (at time.Duration, sampled int) {
	at = sc.OutageStart + sc.OutageLen/2
	if n < 1 {
		return at, 0
	}
	if last := sc.startAt(n-1, n); last > at {
		at = min(last, sc.OutageStart+sc.OutageLen*9/10)
	}
	for i := range n {
		if sc.startAt(i, n) <= at {
			sampled++
		}
	}
	return at, sampled
}

// firstAttemptsInOutage is how many of n sessions send their prompt
// during the outage.
func (sc *Scenario) firstAttemptsInOutage(n int) int {
	count := 0
	for i := range n {
		if sc.inOutage(sc.startAt(i, n)) {
			count++
		}
	}
	return count
}

// starter starts each session at its startAt on a clock, and can cancel
// the starts not made yet.
type starter struct {
	mu      sync.Mutex
	pending []clock.Timer
}

// launch calls start(i) for every session i of n: at once without a ramp,
// else from a timer of clk at the session's start.
func (st *starter) launch(clk clock.Clock, sc *Scenario, n int, start func(i int)) {
	for i := range n {
		d := sc.startAt(i, n)
		if d <= 0 {
			start(i)
			continue
		}
		t := clk.AfterFunc(d, func() { start(i) })
		st.mu.Lock()
		st.pending = append(st.pending, t)
		st.mu.Unlock()
	}
}

// cancel stops the starts not made yet and reports how many it stopped.
func (st *starter) cancel() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	stopped := 0
	for _, t := range st.pending {
		if t.Stop() {
			stopped++
		}
	}
	st.pending = nil
	return stopped
}

// weighted is one entry of an error mix.
type weighted struct {
	kind   errorKind
	weight int
}

// parseMix reads "429=30,429-hint=20,503=30,overload=20".
func parseMix(s string) ([]weighted, error) {
	var mix []weighted
	for _, part := range strings.Split(s, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		kind, known := errorKinds[name]
		if !ok || !known {
			return nil, fmt.Errorf("-mix: %q is not kind=weight with a kind among %s", part, strings.Join(kindNames(), ", "))
		}
		n, err := strconv.Atoi(w)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-mix: weight of %s must be a whole number ≥ 0, got %q", name, w)
		}
		if n > 0 {
			mix = append(mix, weighted{kind, n})
		}
	}
	if len(mix) == 0 {
		return nil, fmt.Errorf("-mix: no kind has a positive weight")
	}
	return mix, nil
}

func kindNames() []string {
	names := make([]string, 0, len(errorKinds))
	for n := range errorKinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// kindOf deals session i its error kind: the mix repeats every
// sum-of-weights sessions, so any prefix of sessions holds it in proportion.
func (sc *Scenario) kindOf(i int) errorKind {
	total := 0
	for _, w := range sc.Mix {
		total += w.weight
	}
	slot := i % total
	for _, w := range sc.Mix {
		if slot < w.weight {
			return w.kind
		}
		slot -= w.weight
	}
	panic("unreachable")
}

// model is the model a session of that kind asks for: the fake server
// matches its rules on it.
func model(k errorKind) string { return "m-" + k.name }

// inOutage reports whether t (from the start of the run) falls in the outage.
func (sc *Scenario) inOutage(t time.Duration) bool {
	return t >= sc.OutageStart && t < sc.OutageStart+sc.OutageLen
}

// outcome is the answer of the in-process provider (virtual mode) to a
// request at t for model and key.
func (sc *Scenario) outcome(t time.Duration, modelID, key string) *messages.AssistantMessage {
	if !sc.inOutage(t) {
		return provider.Text("ok")
	}
	k := errorKinds[strings.TrimPrefix(modelID, "m-")]
	if sc.UsageLimit && key == limitedKey {
		k = usageLimit
	}
	return provider.Failure(k.status, k.text, k.headers)
}

// fakellm is the same scenario as fake-server rules (real mode), with the
// window in ms since the server's clock was reset.
func (sc *Scenario) fakellm() *fakellm.Scenario {
	from, to := sc.OutageStart.Milliseconds(), (sc.OutageStart + sc.OutageLen).Milliseconds()
	out := &fakellm.Scenario{Default: &fakellm.Respond{Text: "ok", Chunks: 1}}
	if sc.UsageLimit {
		out.Rules = append(out.Rules, fakellm.Rule{Name: usageLimit.name,
			Match:   fakellm.Match{Key: limitedKey, FromMs: from, ToMs: to},
			Respond: fakellm.Respond{Preset: usageLimit.preset}})
	}
	for _, w := range sc.Mix {
		out.Rules = append(out.Rules, fakellm.Rule{Name: w.kind.name,
			Match:   fakellm.Match{Model: model(w.kind), FromMs: from, ToMs: to},
			Respond: fakellm.Respond{Preset: w.kind.preset, Headers: w.kind.headers}})
	}
	return out
}

// String describes the scenario in one line.
func (sc *Scenario) String() string {
	parts := make([]string, len(sc.Mix))
	for i, w := range sc.Mix {
		parts[i] = fmt.Sprintf("%s=%d", w.kind.name, w.weight)
	}
	s := fmt.Sprintf("outage %v from %v, mix %s", sc.OutageLen, sc.OutageStart, strings.Join(parts, ","))
	if sc.UsageLimit {
		s += ", usage limits on " + limitedKey
	}
	if sc.Ramp > 0 {
		s += fmt.Sprintf(", prompts spread over %v", sc.Ramp)
	}
	return s
}

// scenarioProvider is the in-process provider of virtual mode: it answers
// by the scenario at the clock's time and records each request.
type scenarioProvider struct {
	sc    *Scenario
	clk   clock.Clock
	start time.Time
	rec   *recorder
}

// Stream answers one request by the scenario, at once.
func (p *scenarioProvider) Stream(ctx context.Context, req provider.Request, _ func(provider.Delta)) *messages.AssistantMessage {
	if ctx.Err() != nil {
		return provider.Aborted(nil)
	}
	now := p.clk.Now()
	p.rec.request(now)
	return p.sc.outcome(now.Sub(p.start), req.Model, req.APIKey)
}

// ResetSession has nothing to reset.
func (p *scenarioProvider) ResetSession(string) {}

// recordingProvider records each request of a real provider.
type recordingProvider struct {
	provider.Provider
	rec        *recorder
	resetClock func() error // restarts the fake server's scenario clock
}

// Stream records the request, then streams it.
func (p *recordingProvider) Stream(ctx context.Context, req provider.Request, onDelta func(provider.Delta)) *messages.AssistantMessage {
	p.rec.request(time.Now())
	return p.Provider.Stream(ctx, req, onDelta)
}
