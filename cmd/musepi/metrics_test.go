package main

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/musepi/musepi/internal/testkit/nodetest"
	"github.com/musepi/musepi/provider/fakellm"
)

// stormScenario is the fake server's side of the metrics storm. Key main-a
// is over its quota (a usage limit: switch to main-b); main-b's m1 is
// overloaded once (fallback to backup/m1); then the backup key answers
// each request with the next rule of its script, prompt by prompt.
const stormScenario = `{"rules":[
 {"name":"main-a quota","match":{"key":"main-a"},"respond":{"preset":"quota"}},
 {"name":"main-b overloaded","match":{"key":"main-b","first":1},"respond":{"preset":"overloaded"}},
 {"name":"main-b answers","match":{"key":"main-b"},"respond":{"text":"main answers"}},
 {"name":"p1 503","match":{"key":"backup-k","first":1},"respond":{"preset":"unavailable"}},
 {"name":"p1 429","match":{"key":"backup-k","first":1},"respond":{"preset":"rate_limit","headers":{"retry-after":"0.05"}}},
 {"name":"p1 answer","match":{"key":"backup-k","first":1},"respond":{"text":"one"}},
 {"name":"p2 503","match":{"key":"backup-k","first":1},"respond":{"preset":"unavailable"}},
 {"name":"p2 answer","match":{"key":"backup-k","first":1},"respond":{"text":"two"}},
 {"name":"p3 429 for 10 minutes","match":{"key":"backup-k","first":1},"respond":{"preset":"rate_limit","headers":{"retry-after":"600"}}},
 {"name":"p4 400","match":{"key":"backup-k","first":1},"respond":{"status":400,"message":"invalid request"}},
 {"name":"p5 503 x5","match":{"key":"backup-k","first":5},"respond":{"preset":"unavailable"}},
 {"name":"p6 503 for 30 s","match":{"key":"backup-k","first":1},"respond":{"preset":"unavailable","headers":{"retry-after":"30"}}},
 {"name":"p7 answer","match":{"key":"backup-k"},"respond":{"text":"seven"}}]}`

// stormConfig is the runtime of the storm: two providers on the fake
// server, main with two keys and backup/m1 as the fallback.
const stormConfig = `default_model = "main/m1"
[providers.main]
kind = "openai"
base_url = "%[1]s/v1"
credentials = [{ name = "key-a", api_key_env = "MUSEPI_TEST_MAIN_A" }, { name = "key-b", api_key_env = "MUSEPI_TEST_MAIN_B" }]
[providers.backup]
kind = "openai"
base_url = "%[1]s/v1"
credentials = [{ name = "only", api_key_env = "MUSEPI_TEST_BACKUP" }]
[retry]
base_delay_ms = 20
max_delay_ms = 60000
max_retries = 4
[retry.fallback_chains]
default = ["backup/m1"]
`

// clientView is what the RPC client saw, counted the way the metrics are
// labelled; each map's key is the label values joined by "|".
type clientView struct {
	attempts, backoffCount, switches, fallbacks, succeeded, chains, prompts, errors map[string]float64
	backoffSum                                                                      map[string]float64
	lastProvider, lastModel                                                         string
}

func newClientView() *clientView {
	return &clientView{attempts: map[string]float64{}, backoffCount: map[string]float64{}, backoffSum: map[string]float64{},
		switches: map[string]float64{}, fallbacks: map[string]float64{}, succeeded: map[string]float64{},
		chains: map[string]float64{}, prompts: map[string]float64{}, errors: map[string]float64{}}
}

func key(parts ...any) string {
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, "|")
}

// add counts one line of the RPC output.
func (v *clientView) add(obj map[string]any) {
	switch obj["type"] {
	case "message_end":
		msg, _ := obj["message"].(map[string]any)
		if msg["role"] == "assistant" && msg["stopReason"] == "error" {
			status := "none"
			if s, ok := msg["httpStatus"].(float64); ok && s != 0 {
				status = fmt.Sprint(s)
			}
			v.errors[key(msg["provider"], msg["model"], status)]++
		}
	case "agent_end":
		msgs, _ := obj["messages"].([]any)
		for _, m := range msgs {
			if msg, _ := m.(map[string]any); msg["role"] == "assistant" {
				v.lastProvider, v.lastModel = fmt.Sprint(msg["provider"]), fmt.Sprint(msg["model"])
			}
		}
	case "auto_retry_start":
		class := obj["errorClass"]
		v.attempts[key(v.lastProvider, v.lastModel, class)]++
		v.backoffCount[key(v.lastProvider, class)]++
		v.backoffSum[key(v.lastProvider, class)] += obj["delayMs"].(float64) / 1000
	case "credential_switch":
		v.switches[key(obj["provider"], obj["reason"])]++
	case "retry_fallback_applied":
		v.fallbacks[key(obj["role"], obj["from"], obj["to"])]++
	case "retry_fallback_succeeded":
		v.succeeded[key(obj["role"], obj["model"])]++
	case "auto_retry_end":
		outcome := "failure"
		switch {
		case obj["success"] == true:
			outcome = "success"
		case obj["finalError"] == "Retry cancelled":
			outcome = "cancelled"
		}
		v.chains[outcome]++
	case "agent_settled":
		outcome := "failure"
		if obj["success"] == true {
			outcome = "success"
		}
		v.prompts[outcome]++
	}
}

// scrape reads url's metrics.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// series are the values of family name by its label values (in the order
// of labels, joined by "|"): a counter's or gauge's value, a histogram's
// count (sum: its sum). Series at zero are left out, as the client saw none.
func series(fams map[string]*dto.MetricFamily, name string, sum bool, labels ...string) map[string]float64 {
	out := map[string]float64{}
	fam := fams[name]
	if fam == nil {
		return out
	}
	for _, m := range fam.GetMetric() {
		var value float64
		switch {
		case m.GetCounter() != nil:
			value = m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			value = m.GetGauge().GetValue()
		case m.GetHistogram() != nil && sum:
			value = m.GetHistogram().GetSampleSum()
		case m.GetHistogram() != nil:
			value = float64(m.GetHistogram().GetSampleCount())
		}
		if value == 0 {
			continue
		}
		vals := map[string]string{}
		for _, l := range m.GetLabel() {
			vals[l.GetName()] = l.GetValue()
		}
		parts := make([]any, len(labels))
		for i, l := range labels {
			parts[i] = vals[l]
		}
		out[key(parts...)] += value
	}
	return out
}

func expectSeries(t *testing.T, name string, got, want map[string]float64) {
	t.Helper()
	if len(want) == 0 {
		t.Errorf("%s: the client saw no such event; the storm does not exercise it", name)
	}
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var diffs []string
	for k := range keys {
		if math.Abs(got[k]-want[k]) > 1e-9 {
			diffs = append(diffs, fmt.Sprintf("{%s}: /metrics %g, client %g", k, got[k], want[k]))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("%s differs from the events the client saw:\n  %s", name, strings.Join(diffs, "\n  "))
	}
}

var metricsLine = regexp.MustCompile(`musepi rpc: metrics on (http://127\.0\.0\.1:\d+/metrics)`)

// lockedBuffer is a process's stderr, safe to read while it is written.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// metricsURL waits for the address musepi rpc prints on stderr.
func metricsURL(t *testing.T, stderr *lockedBuffer) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := metricsLine.FindStringSubmatch(stderr.String()); m != nil {
			return m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no metrics address on stderr within 10 s: %q", stderr.String())
	return ""
}

// lineCursor walks the lines an rpcProc has read, in order, whoever read
// them: waiting for a response reads on, and the events of a prompt can
// come before its response (the session runs on while the command's
// goroutine writes it).
//
// It reads p.seen only, never p.next: next takes first from p.held, the
// lines read while waiting for a response, which a cursor over p.seen may
// have passed already. Mixing the two returned such a line a second time:
// under CI load prompt 4's agent_settled came before its response, was
// waited for through p.seen and stayed held, and p.next gave it again as
// prompt 5's; the test then ran one prompt behind the session (it aborted
// prompt 5's short backoff and took prompt 6's settle, 503 after its
// retries, for prompt 7's).
type lineCursor struct {
	p  *rpcProc
	at int // the index in p.seen of the next line to look at
}

// waitFor returns the next line of type typ after the last one waited
// for, among the lines already read or those to come.
func (c *lineCursor) waitFor(typ string, within time.Duration) map[string]any {
	c.p.t.Helper()
	deadline := time.After(within)
	for {
		for ; c.at < len(c.p.seen); c.at++ {
			if obj := c.p.seen[c.at]; obj["type"] == typ {
				c.at++
				return obj
			}
		}
		c.p.read(typ, deadline) // appends to p.seen
	}
}

// TestLineCursorTakesEachLineOnce replays the order of lines that made
// TestRPCMetricsDuringStorm flaky: a prompt that settles before its
// response is written. Waiting for the next prompt's agent_settled must
// give that prompt's, not the one already taken while it was held.
func TestLineCursorTakesEachLineOnce(t *testing.T) {
	script := []map[string]any{
		{"type": "agent_start", "generation": 4.0},
		{"type": "agent_settled", "generation": 4.0, "success": false},
		{"type": "response", "id": "4", "success": true},
		{"type": "response", "id": "5", "success": true},
		{"type": "agent_start", "generation": 5.0},
		{"type": "auto_retry_start", "attempt": 1.0},
		{"type": "agent_settled", "generation": 5.0, "success": false},
	}
	p := &rpcProc{t: t, lines: make(chan map[string]any, len(script))}
	for _, obj := range script {
		p.lines <- obj
	}
	c := &lineCursor{p: p}
	for _, gen := range []float64{4, 5} {
		id := fmt.Sprint(gen)
		if r := p.response(id); r["success"] != true {
			t.Fatalf("response %s: %v", id, r)
		}
		if got := c.waitFor("agent_settled", time.Second); got["generation"] != gen {
			t.Fatalf("after response %s, waitFor(agent_settled) = %v, want generation %g", id, got, gen)
		}
	}
}

// TestRPCMetricsDuringStorm drives seven prompts through musepi rpc
// --metrics-addr against injected usage limits, overloads, 503s and 429s,
// a fallback, a fail-fast, a non-retryable 400, exhausted retries and a
// cancelled backoff, and checks /metrics against the events the client saw:
// equal, series by series.
func TestRPCMetricsDuringStorm(t *testing.T) {
	bin := buildCommand(t)
	sc, err := fakellm.ParseScenario([]byte(stormScenario))
	if err != nil {
		t.Fatal(err)
	}
	srv := fakellm.New(sc)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cfg := filepath.Join(t.TempDir(), "musepi.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(stormConfig, base)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MUSEPI_TEST_MAIN_A", "main-a")
	t.Setenv("MUSEPI_TEST_MAIN_B", "main-b")
	t.Setenv("MUSEPI_TEST_BACKUP", "backup-k")
	stderr := &lockedBuffer{}
	p := spawnRPCStderr(t, bin, stderr, "--config", cfg, "--metrics-addr", "127.0.0.1:0")
	url := metricsURL(t, stderr)

	view := newClientView()
	viewed := 0 // the lines of p.seen counted in view
	absorb := func() {
		for _, obj := range p.seen[viewed:] {
			view.add(obj)
		}
		viewed = len(p.seen)
	}
	lines := &lineCursor{p: p}
	waitFor := lines.waitFor
	settle := func() map[string]any {
		t.Helper()
		settled := waitFor("agent_settled", 20*time.Second)
		absorb()
		return settled
	}
	// Each prompt is sent once the last has settled, as a follow-up: the
	// server clears its "prompt running" flag only after agent_settled has
	// gone out, so a plain prompt sent at once may be refused as busy; a
	// follow-up is queued then, and runs as soon as the flag clears.
	prompt := func(id string) {
		t.Helper()
		p.send(fmt.Sprintf(`{"id":%q,"type":"prompt","message":"prompt %s","streamingBehavior":"followUp"}`, id, id))
		if r := p.response(id); r["success"] != true {
			t.Fatalf("prompt %s: %v", id, r)
		}
	}
	wantOutcomes := []bool{true, true, false, false, false}
	for i, want := range wantOutcomes {
		id := fmt.Sprint(i + 1)
		prompt(id)
		if got := settle(); got["success"] != want {
			t.Fatalf("prompt %s settled %v, want success=%t; seen %v", id, got, want, p.types())
		}
	}

	// Prompt 6 waits in a 30 s backoff: the gauges say so.
	prompt("6")
	start := waitFor("auto_retry_start", 10*time.Second)
	waiting := func(fams map[string]*dto.MetricFamily) string {
		return fmt.Sprint(series(fams, "musepi_retry_waiting", false, "provider", "class"),
			series(fams, "musepi_sessions", false, "state"), series(fams, "musepi_retry_chains_open", false))
	}
	const wantWaiting = "map[backup|transient:1] map[backoff:1] map[:1]"
	got := ""
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if fams = scrape(t, url); waiting(fams) == wantWaiting {
			break
		}
	}
	if got = waiting(fams); got != wantWaiting {
		t.Fatalf("during the backoff (%v): waiting, sessions by state, chains open = %s, want %s\nseen %v",
			start, got, wantWaiting, p.types())
	}
	p.send(`{"id":"abort","type":"abort_retry"}`)
	if got := settle(); got["success"] != false {
		t.Fatalf("prompt 6 settled %v after abort_retry", got)
	}
	prompt("7")
	if got := settle(); got["success"] != true {
		t.Fatalf("prompt 7 settled %v; the lines since prompt 6:\n%s", got, p.linesSince("6"))
	}

	// The telemetry subscriber may lag the RPC writer: wait until it has
	// seen every prompt settle.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		fams = scrape(t, url)
		if n := series(fams, "musepi_prompts_total", false)[""]; n == 7 {
			break
		}
	}
	expectSeries(t, "musepi_prompts_total", series(fams, "musepi_prompts_total", false, "outcome"), view.prompts)
	expectSeries(t, "musepi_retry_attempts_total", series(fams, "musepi_retry_attempts_total", false, "provider", "model", "class"), view.attempts)
	expectSeries(t, "musepi_retry_backoff_seconds (count)", series(fams, "musepi_retry_backoff_seconds", false, "provider", "class"), view.backoffCount)
	expectSeries(t, "musepi_retry_backoff_seconds (sum)", series(fams, "musepi_retry_backoff_seconds", true, "provider", "class"), nonZero(view.backoffSum))
	expectSeries(t, "musepi_credential_switches_total", series(fams, "musepi_credential_switches_total", false, "provider", "reason"), view.switches)
	expectSeries(t, "musepi_fallback_applied_total", series(fams, "musepi_fallback_applied_total", false, "role", "from", "to"), view.fallbacks)
	expectSeries(t, "musepi_fallback_succeeded_total", series(fams, "musepi_fallback_succeeded_total", false, "role", "model"), view.succeeded)
	expectSeries(t, "musepi_retry_chains_total", series(fams, "musepi_retry_chains_total", false, "outcome"), view.chains)
	expectSeries(t, "musepi_provider_request_errors_total", series(fams, "musepi_provider_request_errors_total", false, "provider", "model", "status"), view.errors)
	// Every usage limit of the storm was retried: one auto_retry_start each.
	usage := map[string]float64{}
	for k, n := range view.attempts {
		if prov, model, class := splitKey3(k); class == "usage_limit" {
			usage[key(prov, model)] += n
		}
	}
	expectSeries(t, "musepi_usage_limits_total", series(fams, "musepi_usage_limits_total", false, "provider", "model"), usage)
	for _, outcome := range []string{"success", "failure", "cancelled"} {
		if view.chains[outcome] == 0 {
			t.Errorf("the storm ended no retry chain with outcome %s", outcome)
		}
	}
	// The server's view: every error response it sent is a failed call.
	byStatus := map[string]float64{}
	for k, n := range view.errors {
		_, _, status := splitKey3(k)
		byStatus[status] += n
	}
	server := map[string]float64{}
	for status, n := range srv.Stats().ByStatus {
		if !strings.HasPrefix(status, "2") {
			server[status] += float64(n)
		}
	}
	expectSeries(t, "fake server error responses by status", byStatus, server)
	if lost := series(fams, "musepi_telemetry_events_lost_total", false)[""]; lost != 0 {
		t.Errorf("the telemetry subscriber lost %g events", lost)
	}
	t.Logf("storm: %d RPC lines; attempts %v; chains %v; errors %v", len(p.seen), view.attempts, view.chains, view.errors)
}

func splitKey3(k string) (a, b, c string) {
	parts := strings.SplitN(k, "|", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	return parts[0], parts[1], parts[2]
}

// nonZero drops the zero entries of m (a series at zero is not exported
// apart from its count).
func nonZero(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

func TestMetricsAddrWarning(t *testing.T) {
	for _, tc := range []struct {
		addr, want string
	}{
		{":9465", "--metrics-addr :9465 listens on every interface; give a host such as 127.0.0.1:9465 to keep it local"},
		{":0", "--metrics-addr :0 listens on every interface; give a host such as 127.0.0.1:0 to keep it local"},
		{"127.0.0.1:9465", ""},
		{"localhost:9465", ""},
		{"[::1]:9465", ""},
		{"0.0.0.0:9465", ""}, // every interface, on purpose
		{"no-port", ""},      // refused on the command line
	} {
		if got := metricsAddrWarning(tc.addr); got != tc.want {
			t.Errorf("metricsAddrWarning(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// TestMetricsAddrWithoutHost: node and rpc, the commands with
// --metrics-addr, warn on stderr that an address without a host listens
// on every interface.
func TestMetricsAddrWithoutHost(t *testing.T) {
	t.Setenv("MUSEPI_CMD_TEST_KEY", "sk-test")
	bin := buildCommand(t)
	noDB := strings.Replace(clusterTable, "127.0.0.1:5432", fmt.Sprintf("127.0.0.1:%d", nodetest.FreePort(t)), 1)
	config := filepath.Join(t.TempDir(), "node.toml")
	if err := os.WriteFile(config, []byte(goodConfig+noDB), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd  string
		args []string
		code int // node: its database is unreachable; rpc: stdin is empty
	}{
		{"node", []string{"--config", config}, 1},
		{"rpc", nil, 0},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			code, errOut := runToEnd(t, bin, append([]string{tc.cmd, "--metrics-addr", ":0"}, tc.args...)...)
			want := "musepi " + tc.cmd + ": --metrics-addr :0 listens on every interface; give a host such as 127.0.0.1:0 to keep it local\n"
			if code != tc.code || !strings.Contains(errOut, want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errOut, tc.code, want)
			}
		})
	}
}

// overloadConfig is a runtime with the overload limiter on, whose one
// provider is the fake server.
const overloadConfig = `default_model = "main/m1"
[providers.main]
kind = "openai"
base_url = "%s/v1"
credentials = [{ name = "only", api_key_env = "OPENAI_API_KEY" }]
[retry]
base_delay_ms = 20
[overload]
enabled = true
`

// TestRPCOverloadLimiterMetrics: with [overload] on, /metrics shows the
// limiter's figures of each model once it has had a call, as the real
// adapter's answers move them. The fake server answers the first call
// with OpenAI's overload answer (503 "The server is overloaded"): the
// limit falls from 100 to 1 (0.9 of the one call in flight); the retry's
// answer raises it to 2. No turn queued: no capacity wait.
func TestRPCOverloadLimiterMetrics(t *testing.T) {
	t.Parallel() // mostly waiting on a process
	bin := buildCommand(t)
	sc, err := fakellm.ParseScenario([]byte(`{"rules":[{"name":"overloaded once","match":{"first":1},"respond":{"preset":"overloaded"}}],"default":{"text":"ok"}}`))
	if err != nil {
		t.Fatal(err)
	}
	srv := fakellm.New(sc)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cfg := filepath.Join(t.TempDir(), "musepi.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(overloadConfig, base)), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	p := spawnRPCStderr(t, bin, stderr, "--config", cfg, "--metrics-addr", "127.0.0.1:0") // OPENAI_API_KEY set
	url := metricsURL(t, stderr)
	figures := func(fams map[string]*dto.MetricFamily) string {
		return fmt.Sprint(series(fams, "musepi_concurrency_limit", false, "provider", "model"),
			series(fams, "musepi_concurrency_inflight", false, "provider", "model"),
			series(fams, "musepi_capacity_wait_seconds", false, "provider", "priority"))
	}
	if got := figures(scrape(t, url)); got != "map[] map[] map[]" {
		t.Fatalf("before any call: limit, in flight, capacity waits = %s; want none", got)
	}
	p.send(`{"id":"1","type":"prompt","message":"hi"}`)
	if r := p.response("1"); r["success"] != true {
		t.Fatalf("prompt: %v", r)
	}
	lines := &lineCursor{p: p}
	if got := lines.waitFor("auto_retry_start", 20*time.Second); got["errorClass"] != "transient" {
		t.Fatalf("the overload answer was not retried: %v", got)
	}
	if got := lines.waitFor("agent_settled", 20*time.Second); got["success"] != true {
		t.Fatalf("settled %v; seen %v", got, p.types())
	}
	// The answer's end reaches the limiter beside agent_settled, not before
	// it: wait until the limiter has taken it. series leaves out what is
	// at 0: no call in flight.
	const want = "map[main|m1:2] map[] map[]"
	got := ""
	for deadline := time.Now().Add(10 * time.Second); got != want && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = figures(scrape(t, url))
	}
	if got != want {
		t.Errorf("after the prompt: limit, in flight, capacity waits = %s; want %s", got, want)
	}
}
