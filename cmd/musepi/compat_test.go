package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musepi/musepi/internal/testkit/testtool"
	"github.com/musepi/musepi/provider/fakellm"
)

// compatScenario is what the fake LLM answers each model of the pi
// compatibility test (compat/pi/compat.ts) with.
var compatScenario = fakellm.Scenario{
	Rules: []fakellm.Rule{
		{Name: "waiter", Match: fakellm.Match{Model: "waiter"},
			Respond: fakellm.Respond{Preset: "rate_limit", Headers: map[string]string{"retry-after": "20"}}},
		{Name: "broken", Match: fakellm.Match{Model: "broken"}, Respond: fakellm.Respond{Preset: "overloaded"}},
		{Name: "primary", Match: fakellm.Match{Model: "primary"}, Respond: fakellm.Respond{Preset: "overloaded"}},
		{Name: "flaky", Match: fakellm.Match{Model: "flaky", First: 1}, Respond: fakellm.Respond{Preset: "overloaded"}},
		{Name: "quota", Match: fakellm.Match{Model: "quota", First: 1}, Respond: fakellm.Respond{Preset: "quota"}},
		{Name: "tooluse", Match: fakellm.Match{Model: "tooluse", First: 1},
			Respond: fakellm.Respond{ToolCall: &fakellm.ToolCall{Name: "lookup", Arguments: `{"q":"weather"}`}}},
		{Name: "thinker", Match: fakellm.Match{Model: "thinker"}, Respond: fakellm.Respond{Thinking: "Let me think.", Text: "Thought it over."}},
		{Name: "athinker", Match: fakellm.Match{Model: "athinker"}, Respond: fakellm.Respond{Thinking: "Hmm.", Text: "Done thinking."}},
		{Name: "slow", Match: fakellm.Match{Model: "slow"}, Respond: fakellm.Respond{Text: strings.Repeat("slowly ", 40), Chunks: 40, ChunkDelayMs: 100}},
		{Name: "queued", Match: fakellm.Match{Model: "queued"}, Respond: fakellm.Respond{Text: "queued answer", Chunks: 4, ChunkDelayMs: 100}},
	},
	Default: &fakellm.Respond{Text: "Hello from the compat test.", Chunks: 3},
}

const compatConfigA = `
default_model = "fake/plain"

[providers.fake]
kind = "openai"
base_url = "%[1]s/v1"
models = ["plain", "thinker", "tooluse", "flaky", "slow", "waiter", "broken", "quota", "queued"]
  [providers.fake.prices.plain]
  input = 2.5
  output = 10
  [[providers.fake.credentials]]
  name = "first"
  api_key_env = "COMPAT_KEY_FIRST"
  [[providers.fake.credentials]]
  name = "second"
  api_key_env = "COMPAT_KEY_SECOND"

[providers.ant]
kind = "anthropic"
base_url = "%[1]s"
models = ["athinker"]
  [[providers.ant.credentials]]
  name = "ant"
  api_key_env = "COMPAT_KEY_ANT"

[retry]
base_delay_ms = 100
model_fallback = false
`

const compatConfigB = `
default_model = "fake/primary"
history_dir = "%[2]s"

[providers.fake]
kind = "openai"
base_url = "%[1]s/v1"
models = ["primary", "backup"]
  [[providers.fake.credentials]]
  name = "only"
  api_key_env = "COMPAT_KEY_FIRST"

[retry]
base_delay_ms = 100
model_fallback = true
  [retry.fallback_chains]
  default = ["fake/backup"]
`

// TestPiRPCCompat drives `musepi rpc` through pi's own RpcClient
// (@mariozechner/pi-coding-agent, pinned in compat/pi/package-lock.json)
// and checks every line it receives against pi's TypeScript types; see
// compat/pi/compat.ts for the checks.
func TestPiRPCCompat(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the TypeScript test and runs Node")
	}
	t.Parallel() // mostly waiting on processes
	pi := preparePi()
	switch {
	case pi.missing != "":
		testtool.Missing(t, testtool.Node, pi.missing)
	case pi.failed != nil:
		t.Fatal(pi.failed)
	}
	dir, node := pi.dir, pi.node
	srv := fakellm.New(&compatScenario)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })

	tmp := t.TempDir()
	configA := filepath.Join(tmp, "a.toml")
	configB := filepath.Join(tmp, "b.toml")
	writeFile(t, configA, fmt.Sprintf(compatConfigA, base))
	writeFile(t, configB, fmt.Sprintf(compatConfigB, base, filepath.Join(tmp, "history")))
	linesDir := filepath.Join(tmp, "lines")
	if err := os.Mkdir(linesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"sk-compat-first", "sk-compat-second", "sk-compat-ant"}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := buildCommand(t)
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "build", "compat.js"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"MUSEPI_BIN="+bin, "MUSEPI_CONFIG_A="+configA, "MUSEPI_CONFIG_B="+configB, "MUSEPI_LINES_DIR="+linesDir,
		"MUSEPI_SECRETS="+strings.Join(secrets, ","),
		"COMPAT_KEY_FIRST="+secrets[0], "COMPAT_KEY_SECOND="+secrets[1], "COMPAT_KEY_ANT="+secrets[2])
	out, err := cmd.CombinedOutput()
	t.Logf("compat.js output:\n%s", out)
	if err != nil {
		t.Fatalf("pi compatibility test failed: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var summary struct {
		Checks int `json:"checks"`
		Lines  int `json:"lines"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &summary); err != nil || summary.Checks == 0 || summary.Lines == 0 {
		t.Fatalf("no summary line from compat.js (%v): %q", err, lines[len(lines)-1])
	}
}

// piPrepared is compat/pi (dir) made ready for TestPiRPCCompat: pi's
// client installed and the TypeScript test built, with node the path of
// Node.js; or why not: a tool missing (Node.js >= 20.6 and npm; npm ci
// failing, as with no registry), for testtool.Missing, or the build
// failed.
type piPrepared struct {
	dir, node string
	missing   string
	failed    error
}

// preparePi makes compat/pi ready once: `npm ci` when node_modules lacks
// pi's client, as in a fresh clone, then `npm run build`. TestMain starts
// it when the run may hold TestPiRPCCompat, so that it goes on while the
// other tests run, and the test, whenever its turn among the parallel
// tests comes, finds it done.
var preparePi = sync.OnceValue(func() piPrepared {
	dir, err := filepath.Abs("../../compat/pi")
	if err != nil {
		return piPrepared{failed: err}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return piPrepared{missing: "node not found on PATH"}
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return piPrepared{missing: "npm not found on PATH"}
	}
	out, err := exec.Command(node, "-e", `const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=6)?0:1)`).CombinedOutput()
	if err != nil {
		version, _ := exec.Command(node, "--version").Output()
		return piPrepared{missing: fmt.Sprintf("node %s is older than 20.6 (%v %s)", bytes.TrimSpace(version), err, out)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@mariozechner", "pi-coding-agent")); err != nil {
		install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		install.Dir = dir
		if out, err := install.CombinedOutput(); err != nil {
			return piPrepared{missing: fmt.Sprintf("npm ci in %s failed: %v: %s", dir, err, lastLine(out))}
		}
	}
	build := exec.CommandContext(ctx, npm, "run", "--silent", "build")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		return piPrepared{failed: fmt.Errorf("npm run build (tsc --strict, schema generation): %v\n%s", err, out)}
	}
	return piPrepared{dir: dir, node: node}
})

// lastLine is the last non-empty line of out.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
