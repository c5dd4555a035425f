//go:build linux

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/provider/fakellm"
)

// crashFaults are the LLM faults a round of the crash test draws from:
// each answers the first few requests of the round, then the server answers.
var crashFaults = []string{
	`{"preset":"unavailable"}`,
	`{"preset":"overloaded"}`,
	`{"preset":"rate_limit","headers":{"retry-after":"0"}}`,
	`{"stream_error":true}`,
	`{"text":"cut short","cut_after":1}`,
	`{"text":"stalled for a while","chunks":4,"stall_after":2,"stall_ms":150}`,
}

// A "musepi rpc" killed with SIGKILL at random points of 200 prompts with
// faults never loses or duplicates an acknowledged prompt: after each kill
// the history reads (a torn last line at most), seq runs 1..n, and every
// prompt that got a success response is in it exactly once.
func TestCrashKill9(t *testing.T) {
	t.Parallel() // mostly waiting on processes
	const prompts = 200
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MUSEPI_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (MUSEPI_CRASH_SEED reruns it)", seed)
	rng := rand.New(rand.NewPCG(seed, 14))
	bin := buildCommand(t)
	srv := fakellm.New(&fakellm.Scenario{})
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	dir := t.TempDir()
	cfg := filepath.Join(dir, "musepi.toml")
	hist := filepath.Join(dir, "hist")
	writeConfig(t, cfg, fmt.Sprintf(`default_model = "fake/m1"
history_dir = %q
[providers.fake]
kind = "openai"
base_url = "%s/v1"
credentials = [{name = "k", api_key_env = "OPENAI_API_KEY"}]
[retry]
base_delay_ms = 20
max_delay_ms = 200
`, hist, base))

	acked := map[string]bool{} // prompt texts that got a success response
	sent, kills, tornSeen, interrupted := 0, 0, 0, 0
	begin := time.Now()
	for sent < prompts {
		sc := fmt.Sprintf(`{"rules":[{"match":{"first":%d},"respond":%s}],"default":{"text":"answer","chunks":4}}`,
			rng.IntN(4), crashFaults[rng.IntN(len(crashFaults))])
		parsed, err := fakellm.ParseScenario([]byte(sc))
		if err != nil {
			t.Fatal(err)
		}
		srv.SetScenario(parsed)
		p := spawnRPC(t, bin, "--config", cfg, "--session-id", "crash")
		killAt := time.Duration(50+rng.IntN(500)) * time.Millisecond
		killer := time.AfterFunc(killAt, func() { _ = p.cmd.Process.Signal(syscall.SIGKILL) })
		sent += driveUntilKilled(p, &sent, prompts, acked)
		killer.Stop()
		_ = p.cmd.Process.Signal(syscall.SIGKILL) // the last round ends the same way
		_ = p.cmd.Wait()
		kills++

		path := filepath.Join(hist, "crash.jsonl")
		rep, err := history.Check(path)
		if errors.Is(err, fs.ErrNotExist) && len(acked) == 0 {
			continue // killed before the session opened its history
		}
		if err != nil {
			t.Fatalf("after kill %d: %v", kills, err)
		}
		if !rep.OK() {
			t.Fatalf("after kill %d (seed %d) the history has problems: %v", kills, seed, rep.Problems)
		}
		if rep.TornBytes > 0 {
			tornSeen++
		}
		interrupted = checkAcked(t, hist, acked, kills)
	}
	t.Logf("%d prompts, %d acknowledged, %d kills, %d torn last lines, %d prompts marked interrupted, %s",
		sent, len(acked), kills, tornSeen, interrupted, time.Since(begin).Round(time.Millisecond))
}

func writeConfig(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// driveUntilKilled sends prompts one after the other (each after the
// previous one's agent_settled) until the process dies or the total
// reaches max; it records acknowledged prompts and returns how many it
// sent.
func driveUntilKilled(p *rpcProc, total *int, max int, acked map[string]bool) int {
	n := 0
	for *total+n < max {
		text := fmt.Sprintf("prompt-%d", *total+n)
		if _, err := p.in.Write([]byte(`{"id":"` + text + `","type":"prompt","message":"` + text + `"}` + "\n")); err != nil {
			return n
		}
		n++
		// Every prompt gets its response and one agent_settled (also one
		// refused because its history write failed), in either order.
		responded, settled := false, false
		for !responded || !settled {
			obj, ok := <-p.lines
			if !ok {
				return n
			}
			switch {
			case obj["type"] == "response" && obj["id"] == text:
				responded = true
				if obj["success"] == true {
					acked[text] = true
				}
			case obj["type"] == "agent_settled":
				settled = true
			}
		}
	}
	return n
}

// checkAcked opens the history as the next run will and checks seq and
// that every acknowledged prompt is in it exactly once (others at most
// once); it returns how many interrupted markers it holds.
func checkAcked(t *testing.T, dir string, acked map[string]bool, kills int) int {
	t.Helper()
	entries := readHistory(t, dir, "crash")
	seen := map[string]int{}
	marked := 0
	for i, e := range entries {
		if e.GetSeq() != uint64(i+1) {
			t.Fatalf("after kill %d: entry %d has seq %d", kills, i, e.GetSeq())
		}
		if u := e.GetUser(); u != nil {
			seen[u.GetText()]++
		}
		if e.GetAssistant().GetStopDetails().GetType() == "interrupted" {
			marked++
		}
	}
	for text, n := range seen {
		if n > 1 {
			t.Fatalf("after kill %d: %q is in the history %d times", kills, text, n)
		}
	}
	for text := range acked {
		if seen[text] != 1 {
			t.Fatalf("after kill %d: acknowledged %q is in the history %d times", kills, text, seen[text])
		}
	}
	return marked
}
