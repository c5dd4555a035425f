package examples

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/provider/fakellm"
)

// The quickstart's lines about retries, against scripted failures of the
// fake server: the give-up line counts the retries made (a retry counts
// once its call went out), as many as the "retry n/max" lines logged
// before it, whatever auto_retry_end's attempt says (the case: one
// "retry 1/10", then "gave up after 2 retries"). Ctrl-C while retry 3/10
// waits claims no count.
func TestQuickstartSummary(t *testing.T) {
	unavailable := fakellm.Respond{Preset: "unavailable"}
	limited := func(seconds string) fakellm.Respond {
		return fakellm.Respond{Preset: "rate_limit", Headers: map[string]string{"retry-after": seconds}}
	}
	first := func(n int, r fakellm.Respond) fakellm.Rule {
		return fakellm.Rule{Match: fakellm.Match{First: n}, Respond: r}
	}
	answer := &fakellm.Respond{Text: "Hello from the fake model."}
	const over = "provider asked for 600000 ms, more than retry.maxDelayMs (300000 ms)"
	cases := []struct {
		name      string
		scenario  fakellm.Scenario
		interrupt string // SIGINT once the output holds this ("": none)
		retries   int    // the "retry n/max" lines logged
		want      string // the last line, without log's time stamp
	}{
		{"success after 1 retry", fakellm.Scenario{Rules: []fakellm.Rule{first(1, unavailable)}, Default: answer},
			"", 1, "(stop, "},
		{"a first wait over retry.maxDelayMs", fakellm.Scenario{Default: new(limited("600"))},
			"", 0, "gave up (retries made: 0; transient, HTTP 429): " + over},
		{"a wait over retry.maxDelayMs after retry 1", fakellm.Scenario{Rules: []fakellm.Rule{first(1, unavailable)}, Default: new(limited("600"))},
			"", 1, "gave up (retries made: 1; transient, HTTP 429): " + over},
		{"give up after 2 retries", fakellm.Scenario{Rules: []fakellm.Rule{first(2, unavailable)}, Default: new(limited("600"))},
			"", 2, "gave up (retries made: 2; transient, HTTP 429): " + over},
		{"Ctrl-C while retry 3/10 waits", fakellm.Scenario{Rules: []fakellm.Rule{first(2, unavailable)}, Default: new(limited("30"))},
			"retry 3/10 in 30s", 3, "cancelled"},
	}
	exe := example(t, "quickstart")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			llm := fakellm.New(&tc.scenario)
			base, err := llm.Start("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = llm.Close() })
			lines := runQuickstart(t, exe, base, tc.interrupt)
			n := 0
			for _, l := range lines {
				if strings.HasPrefix(l, "retry ") {
					n++
				}
			}
			t.Logf("output:\n%s", strings.Join(lines, "\n"))
			last := lines[len(lines)-1]
			if n != tc.retries || !strings.HasPrefix(last, tc.want) {
				t.Errorf("%d retry lines, then %q; want %d, then %q:\n%s", n, last, tc.retries, tc.want, strings.Join(lines, "\n"))
			}
		})
	}
}

// runQuickstart runs the quickstart against the fake server at base, in a
// directory of its own, sends it SIGINT once a line holds interrupt (when
// not ""), and returns its output's lines without log's time stamps.
func runQuickstart(t *testing.T, exe, base, interrupt string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPENAI_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "OPENAI_BASE_URL="+base+"/v1", "OPENAI_API_KEY=sk-main", "OPENAI_API_KEY_2=sk-backup")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var lines []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.SplitN(line, " ", 3); len(f) == 3 && strings.Count(f[0], "/") == 2 { // log's date and time
			line = f[2]
		}
		lines = append(lines, line)
		if interrupt != "" && strings.Contains(line, interrupt) {
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.Close()
	_ = cmd.Wait() // the output says how it ended
	if len(lines) == 0 {
		t.Fatal("no output")
	}
	return lines
}
