package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const goodConfig = `default_model = "openai/gpt-4o"
[providers.openai]
kind = "openai"
models = ["gpt-4o", "gpt-4o-mini"]
credentials = [{ name = "main", api_key_env = "MUSEPI_CMD_TEST_KEY" }]
[providers.anthropic]
kind = "anthropic"
credentials = [{ name = "main", api_key_env = "MUSEPI_CMD_TEST_KEY" }]
[retry.fallback_chains]
default = ["anthropic/claude-sonnet-4"]
`

const badConfig = `default_model = "openai/gpt-4o"
[providers.openai]
kind = "openai"
  [[providers.openai.credentials]]
  name = "main"
  api_key_env = "MUSEPI_CMD_TEST_KEY"
  [[providers.openai.credentials]]
  name = "second"
  api_key_env = "MUSEPI_CMD_TEST_UNSET"
[retry]
max_retries = -1
`

// clusterTable is a [cluster] table with etcd membership.
const clusterTable = `[cluster]
name = "dev"
membership = "etcd"
database_url = "postgres://postgres@127.0.0.1:5432/musepi"
[cluster.etcd]
endpoints = ["http://127.0.0.1:2379"]
`

// configFiles writes the good and the bad configuration files.
func configFiles(t *testing.T) (good, bad string) {
	t.Helper()
	dir := t.TempDir()
	good = filepath.Join(dir, "good.toml")
	bad = filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(good, []byte(goodConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(badConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return good, bad
}

// "musepi config check FILE" prints its findings, one line per problem
// prefixed with the file's name, as they are (they are its output).
func TestRunConfigCheck(t *testing.T) {
	t.Setenv("MUSEPI_CMD_TEST_KEY", "sk-test")
	os.Unsetenv("MUSEPI_CMD_TEST_UNSET")
	good, bad := configFiles(t)
	check := func(wantCode int, path string) (string, string) {
		t.Helper()
		code, out, errOut := runCaptured(t, "config", "check", path)
		if code != wantCode {
			t.Errorf("%s: exit %d, want %d; stdout %q, stderr %q", path, code, wantCode, out, errOut)
		}
		return out, errOut
	}
	if o, e := check(0, good); o != good+": ok (2 providers, default model openai/gpt-4o)\n" || e != "" {
		t.Errorf("good: stdout %q, stderr %q", o, e)
	}
	o, e := check(1, bad)
	want := bad + ": providers.openai.credentials[1].api_key_env: environment variable MUSEPI_CMD_TEST_UNSET is not set\n" +
		bad + ": retry.max_retries: must be 0 or more, got -1\n"
	if o != "" || e != want {
		t.Errorf("bad: stdout %q, stderr %q, want %q", o, e, want)
	}
	dir := t.TempDir()
	node := filepath.Join(dir, "node.toml")
	if err := os.WriteFile(node, []byte(goodConfig+clusterTable), 0o600); err != nil {
		t.Fatal(err)
	}
	if o, e := check(0, node); o != node+`: ok (2 providers, default model openai/gpt-4o, cluster "dev" with etcd membership)`+"\n" || e != "" {
		t.Errorf("cluster: stdout %q, stderr %q", o, e)
	}
	badNode := filepath.Join(dir, "bad-node.toml")
	if err := os.WriteFile(badNode, []byte(goodConfig+strings.Replace(clusterTable, `"etcd"`, `"zookeeper"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if o, e := check(1, badNode); o != "" || e != badNode+`: cluster.membership: unknown membership "zookeeper" (want "etcd" or "automanaged")`+"\n" {
		t.Errorf("bad cluster: stdout %q, stderr %q", o, e)
	}
}

func TestConfigCheckCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the command as a process")
	}
	bin := buildCommand(t)
	t.Setenv("MUSEPI_CMD_TEST_KEY", "sk-test") // inherited by the command
	os.Unsetenv("MUSEPI_CMD_TEST_UNSET")
	good, bad := configFiles(t)

	code, out, errOut := runOutput(t, bin, "config", "check", good)
	if code != 0 || out != good+": ok (2 providers, default model openai/gpt-4o)\n" || errOut != "" {
		t.Errorf("good: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, errOut = runToEnd(t, bin, "config", "check", bad)
	if code != 1 ||
		!strings.Contains(errOut, bad+": providers.openai.credentials[1].api_key_env: environment variable MUSEPI_CMD_TEST_UNSET is not set") ||
		!strings.Contains(errOut, bad+": retry.max_retries: must be 0 or more, got -1") {
		t.Errorf("bad: exit %d, stderr %q", code, errOut)
	}

	// The same good file fails where its key variable is not set.
	cmd := exec.Command(bin, "config", "check", good)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MUSEPI_CMD_TEST_KEY=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	outb, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 ||
		!strings.Contains(string(outb), good+": providers.anthropic.credentials[0].api_key_env: environment variable MUSEPI_CMD_TEST_KEY is not set") {
		t.Errorf("without the key: %v, %q", err, outb)
	}
}
