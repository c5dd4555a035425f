package main

import (
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCLIConventions is the rule every command keeps (docs/cli.md),
// shown on every command: help on stdout, status 0; a wrong
// command line on stderr, naming what is wrong, then the synopsis, status
// 2; a failure on stderr, every line prefixed "musepi CMD: ", status 1.
func TestCLIConventions(t *testing.T) {
	t.Setenv("MUSEPI_CMD_TEST_KEY", "sk-test")
	t.Setenv("MUSEPI_CMD_TEST_EMPTY", " ")
	os.Unsetenv("MUSEPI_CMD_TEST_UNSET")
	good, bad := configFiles(t) // GOOD has no [cluster] table; BAD has two problems
	files := map[string]string{"GOOD": good, "BAD": bad, "MISSING": filepath.Join(t.TempDir(), "missing.toml")}

	type cliCase struct {
		args   string // the command line after "musepi"; $GOOD, $BAD and $MISSING are files
		status int
		want   string // how stdout (status 0) or stderr (else) begins
	}
	// Every command: its help, and an unknown flag.
	var cases []cliCase
	helps := map[string][]string{} // what each command's help holds
	walkCommands(rootCommand, "musepi", func(c *command, name string) {
		cmd := strings.TrimPrefix(name, "musepi")
		cases = append(cases,
			cliCase{cmd + " -h", 0, "usage: " + name},
			cliCase{cmd + " --help", 0, "usage: " + name},
			cliCase{"help" + cmd, 0, "usage: " + name},
			cliCase{cmd + " --bogus", 2, name + ": flag provided but not defined: -bogus"},
		)
		helps[name] = helpHolds(c, name)
	})
	// Every command: a bad value or argument (usage errors), and failures.
	specific := []cliCase{
		{"", 2, "musepi: missing command"},
		{"nope", 2, `musepi: unknown command "nope"`},
		{"help nope", 2, `musepi: unknown command "nope"`},

		{"chat -v=maybe", 2, `musepi chat: invalid boolean value "maybe" for -v: parse error`},
		{"chat --provider nope --model m", 2, `musepi chat: --provider "nope": want anthropic, openai or openai-responses`},
		{"chat --log-format xml", 2, `musepi chat: --log-format "xml": want text or json`},
		{"chat --provider openai --model m --base-url ftp://127.0.0.1/v1", 2, `musepi chat: --base-url: want an http:// or https:// URL, got "ftp://127.0.0.1/v1"`},
		// With its command line right, chat needs a terminal before it
		// opens anything, and here it has none: TestChatNeedsTerminal.

		{"cluster", 2, "musepi cluster: missing command"},
		{"cluster stat", 2, `musepi cluster: unknown command "stat"`},
		{"cluster status", 2, "musepi cluster status: --config is required"},
		{"cluster status --config $GOOD --timeout x", 2, `musepi cluster status: invalid value "x" for flag -timeout: parse error`},
		{"cluster status --config $GOOD extra", 2, `musepi cluster status: unexpected argument "extra"`},
		{"cluster status --config $MISSING", 1, "musepi cluster status: open $MISSING: no such file or directory"},
		{"cluster status --config $GOOD", 1, "musepi cluster status: $GOOD has no [cluster] table (see config/README.md)"},

		{"config", 2, "musepi config: missing command"},
		{"config lint $GOOD", 2, `musepi config: unknown command "lint"`},
		{"config check", 2, "musepi config check: missing FILE"},
		{"config check $GOOD $BAD", 2, `musepi config check: unexpected argument "$BAD"`},
		{"config check $MISSING", 1, "musepi config check: open $MISSING: no such file or directory"},

		{"demo --scenario nope", 2, `musepi demo: --scenario "nope": want tour, outage, give-up or all`},
		{"demo --fast=maybe", 2, `musepi demo: invalid boolean value "maybe" for -fast: parse error`},
		{"demo --scenario outage --config $GOOD", 2, "musepi demo: --scenario cannot be used with --config"},
		{"demo --fast --provider openai --model m", 2, "musepi demo: --fast cannot be used with --provider"},
		{"demo --config $MISSING", 1, "musepi demo: open $MISSING: no such file or directory"},
		{"demo --provider openai --model m --base-url 127.0.0.1:8089/v1", 2, `musepi demo: --base-url: want an http:// or https:// URL, got "127.0.0.1:8089/v1"`},
		{"demo --provider openai --model m --base-url http:///v1", 2, `musepi demo: --base-url: URL "http:///v1" has no host`},
		{"demo --provider anthropic --model m --api-key-env MUSEPI_CMD_TEST_EMPTY", 1, "musepi demo: --provider anthropic: environment variable MUSEPI_CMD_TEST_EMPTY is empty"},

		{"fakellm --listen", 2, "musepi fakellm: flag needs an argument: -listen"},
		{"fakellm extra", 2, `musepi fakellm: unexpected argument "extra"`},
		{"fakellm --scenario $MISSING", 1, "musepi fakellm: open $MISSING: no such file or directory"},
		{"fakellm --listen no-port", 2, `musepi fakellm: --listen: want host:port, got "no-port"`},
		{"fakellm --listen http://127.0.0.1:8089", 2, `musepi fakellm: --listen: want host:port, got "http://127.0.0.1:8089"`},
		{"fakellm --listen 127.0.0.1:http", 2, `musepi fakellm: --listen: port of "127.0.0.1:http" must be 0 to 65535`},
		{"fakellm --rpm -1", 2, "musepi fakellm: --rpm must be 0 (no limit) to 1000000000, got -1"},
		{"fakellm --tpm 1000000001", 2, "musepi fakellm: --tpm must be 0 (no limit) to 1000000000, got 1000000001"},
		{"fakellm --tpm x", 2, `musepi fakellm: invalid value "x" for flag -tpm: parse error`},
		{"fakellm --rpm 5 --scenario $MISSING", 1, "musepi fakellm: open $MISSING: no such file or directory"},

		{"history", 2, "musepi history: missing command"},
		{"history check", 2, "musepi history check: missing FILE"},
		{"history repair $GOOD $BAD", 2, `musepi history repair: unexpected argument "$BAD"`},
		{"history check $MISSING", 1, "musepi history check: history: check $MISSING: open $MISSING: no such file or directory"},
		{"history repair $MISSING", 1, "musepi history repair: history: repair $MISSING: open $MISSING: no such file or directory"},

		{"history show", 2, "musepi history show: missing ID"},
		{"history show s1", 2, "musepi history show: --config is required"},
		{"history show --config $GOOD --timeout -1s s1", 2, "musepi history show: --timeout must be above 0, got -1s"},
		{"history show --config $GOOD s1 s2", 2, `musepi history show: unexpected argument "s2"`},
		{"history show --config $GOOD s1", 1, "musepi history show: $GOOD has no [cluster] table (see config/README.md)"},

		{"node", 2, "musepi node: --config is required"},
		{"node --config $GOOD extra", 2, `musepi node: unexpected argument "extra"`},
		{"node --config $GOOD --log-format xml", 2, `musepi node: --log-format "xml": want text or json`},
		{"node --config $GOOD --metrics-addr no-port", 2, `musepi node: --metrics-addr: want host:port, got "no-port"`},
		{"node --config $GOOD --metrics-addr a/b:9465", 2, `musepi node: --metrics-addr: want a host name or IP address, got "a/b"`},
		{"node --config $MISSING", 1, "musepi node: open $MISSING: no such file or directory"},
		{"node --config $BAD", 1, "musepi node: $BAD: providers.openai.credentials[1].api_key_env: environment variable MUSEPI_CMD_TEST_UNSET is not set"},

		{"rpc --max-line -1", 2, "musepi rpc: --max-line must be 0 (the default, 1048576) or more, got -1"},
		{"rpc --max-line x", 2, `musepi rpc: invalid value "x" for flag -max-line: parse error`},
		{"rpc --config $GOOD --provider openai --model x", 2, "musepi rpc: --config cannot be used with --provider"},
		{"rpc --model x", 2, "musepi rpc: --model needs --provider"},
		{"rpc --base-url http://127.0.0.1:1", 2, "musepi rpc: --base-url needs --provider"},
		{"rpc --provider openai --model m --base-url 127.0.0.1:8089/v1", 2, `musepi rpc: --base-url: want an http:// or https:// URL, got "127.0.0.1:8089/v1"`},
		{"rpc --provider openai --model m --base-url http://127.0.0.1:80890/v1", 2, `musepi rpc: --base-url: port of URL "http://127.0.0.1:80890/v1" must be 1 to 65535`},
		{"rpc --provider openai --model m --base-url=", 2, `musepi rpc: --base-url: want an http:// or https:// URL, got ""`},
		{"rpc --metrics-addr no-port", 2, `musepi rpc: --metrics-addr: want host:port, got "no-port"`},
		{"rpc --metrics-addr 127.0.0.1:65536", 2, `musepi rpc: --metrics-addr: port of "127.0.0.1:65536" must be 0 to 65535`},
		{"rpc --metrics-addr=", 2, `musepi rpc: --metrics-addr: want host:port, got ""`},
		{"rpc --config $GOOD --api-key-env KEY", 2, "musepi rpc: --api-key-env needs --provider"},
		{"rpc --provider openai", 2, "musepi rpc: --provider needs --model"},
		{"rpc --history-sync sometimes", 2, `musepi rpc: --history-sync: history sync "sometimes": want turn, entry or none`},
		{"rpc --cluster", 2, "musepi rpc: --cluster needs --config"},
		{"rpc --cluster --config $GOOD --history-dir dir", 2, "musepi rpc: --cluster cannot be used with --history-dir"},
		{"rpc --config $MISSING", 1, "musepi rpc: open $MISSING: no such file or directory"},
		{"rpc --config $BAD", 1, "musepi rpc: $BAD: providers.openai.credentials[1].api_key_env: environment variable MUSEPI_CMD_TEST_UNSET is not set\n" +
			"musepi rpc: $BAD: retry.max_retries: must be 0 or more, got -1\n"},
		{"rpc --cluster --config $GOOD", 1, "musepi rpc: $GOOD has no [cluster] table"},
		{"rpc --provider openai --model m --api-key-env MUSEPI_CMD_TEST_UNSET", 1, "musepi rpc: --provider openai: environment variable MUSEPI_CMD_TEST_UNSET is not set"},
		{"rpc --provider openai --model m --base-url http://127.0.0.1:1/v1 --api-key-env MUSEPI_CMD_TEST_UNSET", 1, "musepi rpc: --provider openai: environment variable MUSEPI_CMD_TEST_UNSET is not set"},

		{"sessions", 2, "musepi sessions: --config is required"},
		{"sessions --config $GOOD --timeout 0s", 2, "musepi sessions: --timeout must be above 0, got 0s"},
		{"sessions --config $GOOD --json=maybe", 2, `musepi sessions: invalid boolean value "maybe" for -json: parse error`},
		{"sessions --config $GOOD extra", 2, `musepi sessions: unexpected argument "extra"`},
		{"sessions --config $MISSING", 1, "musepi sessions: open $MISSING: no such file or directory"},
		{"sessions --config $GOOD", 1, "musepi sessions: $GOOD has no [cluster] table (see config/README.md)"},

		{"version extra", 2, `musepi version: unexpected argument "extra"`},
	}
	cases = append(cases, specific...)

	for _, tc := range cases {
		t.Run(tc.args, func(t *testing.T) {
			expand := func(s string) string { return os.Expand(s, func(k string) string { return files[k] }) }
			status, out, errOut := runCaptured(t, strings.Fields(expand(tc.args))...)
			want := expand(tc.want)
			got, silent := errOut, out
			if tc.status == 0 {
				got, silent = out, errOut
			}
			if status != tc.status || !strings.HasPrefix(got, want) || silent != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and %q...", status, out, errOut, tc.status, want)
			}
			name, _, _ := strings.Cut(want, ": ") // "musepi CMD" for status 1 and 2
			switch tc.status {
			case 0:
				inOrder(t, out, helps[strings.TrimPrefix(want, "usage: ")]...)
			case 2:
				inOrder(t, errOut, "\nusage: "+name, `Run "`+name+` -h" for help.`)
			case 1:
				for line := range strings.Lines(errOut) {
					if !strings.HasPrefix(line, name+": ") {
						t.Errorf("stderr line %q lacks the prefix %q", line, name+": ")
					}
				}
			}
		})
	}
	walkCommands(rootCommand, "musepi", func(_ *command, name string) {
		for _, tc := range specific {
			if tc.status == 2 && strings.HasPrefix(tc.want, name+": ") {
				return
			}
		}
		t.Errorf("%s: no case of a bad value or argument", name)
	})
}

// walkCommands calls visit on c, called name, and every command under it.
func walkCommands(c *command, name string, visit func(c *command, name string)) {
	visit(c, name)
	for sub, sc := range c.commands {
		walkCommands(sc, name+" "+sub, visit)
	}
}

// helpHolds is what the help of c, called name, holds, in order: its
// synopsis, the first line of what it does, and its commands or flags.
func helpHolds(c *command, name string) []string {
	about, _, _ := strings.Cut(strings.TrimSpace(c.about), "\n")
	holds := []string{"usage: " + name, "\n\n" + about}
	for _, sub := range slices.Sorted(maps.Keys(c.commands)) {
		holds = append(holds, "\n  "+sub+" ")
	}
	fs, _ := c.flagSet(name)
	fs.VisitAll(func(f *flag.Flag) { holds = append(holds, "\n  -"+f.Name) })
	return holds
}
