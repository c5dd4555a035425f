package main

import (
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/provider/fakellm"
)

// TestFakeLLMScenarioLimits: --rpm and --tpm add a limit for every key and
// model after the scenario's own limits.
func TestFakeLLMScenarioLimits(t *testing.T) {
	dir := t.TempDir()
	every := filepath.Join(dir, "every.json")
	if err := os.WriteFile(every, []byte(`{"limits": [{"key": "k", "rpm": 1}, {"tpm": 5}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	const limited = "../../provider/fakellm/testdata/ratelimit.json"
	const quantized = "../../provider/fakellm/testdata/quantized.json" // its limits have window_ms 1000
	tests := []struct {
		name   string
		file   string
		flags  fakellm.Limit
		limits []fakellm.Limit // nil with a nil scenario
		err    string
	}{
		{"no file, no flags", "", fakellm.Limit{}, nil, ""},
		{"flags only", "", fakellm.Limit{RPM: 600, TPM: 200000}, []fakellm.Limit{{RPM: 600, TPM: 200000}}, ""},
		{"rpm only", "", fakellm.Limit{RPM: 60}, []fakellm.Limit{{RPM: 60}}, ""},
		{"file and flags", limited, fakellm.Limit{RPM: 10},
			[]fakellm.Limit{{Key: "key-a", RPM: 600, TPM: 200000}, {Key: "key-b", RPM: 600, TPM: 200000}, {RPM: 10}}, ""},
		{"file without flags", limited, fakellm.Limit{},
			[]fakellm.Limit{{Key: "key-a", RPM: 600, TPM: 200000}, {Key: "key-b", RPM: 600, TPM: 200000}}, ""},
		{"input and output", "", fakellm.Limit{ITPM: 30000, OTPM: 8000}, []fakellm.Limit{{ITPM: 30000, OTPM: 8000}}, ""},
		{"window on the flags' limit", "", fakellm.Limit{RPM: 600, WindowMs: 1000}, []fakellm.Limit{{RPM: 600, WindowMs: 1000}}, ""},
		{"window on the file's limits", limited, fakellm.Limit{WindowMs: 10000},
			[]fakellm.Limit{{Key: "key-a", RPM: 600, TPM: 200000, WindowMs: 10000}, {Key: "key-b", RPM: 600, TPM: 200000, WindowMs: 10000}}, ""},
		{"a file's own window stays", quantized, fakellm.Limit{OTPM: 5, WindowMs: 10000},
			[]fakellm.Limit{{Key: "key-a", Model: "claude", RPM: 50, ITPM: 30000, OTPM: 8000, WindowMs: 1000},
				{Key: "key-a", Model: "gpt", RPM: 500, TPM: 30000, WindowMs: 1000}, {OTPM: 5, WindowMs: 10000}}, ""},
		{"file limits every key", every, fakellm.Limit{TPM: 9}, nil,
			"--rpm, --tpm, --itpm, --otpm: " + every + ": limits[1] already limits every key and model"},
		{"missing file", filepath.Join(dir, "missing.json"), fakellm.Limit{RPM: 1}, nil, "no such file or directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := fakeLLMScenario(tc.file, tc.flags)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.limits == nil && tc.file == "" {
				if sc != nil {
					t.Errorf("scenario %+v, want nil", sc)
				}
				return
			}
			if !reflect.DeepEqual(sc.Limits, tc.limits) {
				t.Errorf("limits %+v, want %+v", sc.Limits, tc.limits)
			}
		})
	}
}

// TestFakeLLMLimitFlagErrors: the limit flags out of range are usage
// errors, before anything is served.
func TestFakeLLMLimitFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--itpm", "-1"}, "--itpm must be 0 (no limit) to 1000000000, got -1"},
		{[]string{"--otpm", "1000000001"}, "--otpm must be 0 (no limit) to 1000000000, got 1000000001"},
		{[]string{"--rpm", "1", "--window", "-1s"}, "--window must be 0 (the minute) or whole milliseconds up to 1m, got -1s"},
		{[]string{"--rpm", "1", "--window", "61s"}, "--window must be 0 (the minute) or whole milliseconds up to 1m, got 1m1s"},
		{[]string{"--rpm", "1", "--window", "1500us"}, "--window must be 0 (the minute) or whole milliseconds up to 1m, got 1.5ms"},
		{[]string{"--window", "1s"}, "--window needs a limit: --rpm, --tpm, --itpm, --otpm or a --scenario with limits"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("fakellm", flag.ContinueOnError)
			run := setupFakeLLM(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var ue usageError
			if err := run(nil); !errors.As(err, &ue) || err.Error() != tc.want {
				t.Errorf("error %v, want the usage error %q", err, tc.want)
			}
		})
	}
}

// TestFakeLLMRateLimitFlags runs "musepi fakellm --rpm 1 --tpm 100000":
// the first call gets the rate-limit headers, the second a 429 with
// retry-after, and the stats count it.
func TestFakeLLMRateLimitFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	s := startCommand(t, buildCommand(t), "--rpm", "1", "--tpm", "100000")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	call := func() (*http.Response, string) {
		t.Helper()
		resp, err := post(t, client, s.base, "m1", false)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	resp, body := call()
	h := resp.Header
	if resp.StatusCode != 200 || h.Get("Anthropic-Ratelimit-Requests-Limit") != "1" || h.Get("Anthropic-Ratelimit-Requests-Remaining") != "0" ||
		h.Get("Anthropic-Ratelimit-Tokens-Limit") != "100000" {
		t.Errorf("first call: %d %v %s", resp.StatusCode, h, body)
	}
	resp, body = call()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "60" ||
		!strings.Contains(body, `"rate_limit_error"`) || !strings.Contains(body, "of 1 requests per minute") {
		t.Errorf("second call: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	stats, err := client.Get(s.base + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(stats.Body)
	stats.Body.Close()
	if !strings.Contains(string(b), `"(rate_limit)": 1`) || !strings.Contains(string(b), `"requests": 1`) {
		t.Errorf("stats %s", b)
	}
	tr.CloseIdleConnections()
	if code, rest, _ := s.stop(t, os.Interrupt); code != 0 {
		t.Errorf("exit %d after SIGINT; stderr %q", code, rest)
	}
}

// TestFakeLLMWindowFlag runs "musepi fakellm --rpm 60 --itpm 30000 --otpm
// 8000 --window 10s": 10 requests at once go through, the 11th gets a 429
// while the headers still report the minute, with the input and output
// limits apart.
func TestFakeLLMWindowFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	s := startCommand(t, buildCommand(t), "--rpm", "60", "--itpm", "30000", "--otpm", "8000", "--window", "10s")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	call := func() (*http.Response, string) {
		t.Helper()
		resp, err := post(t, client, s.base, "m1", false)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	for i := range 10 {
		if resp, body := call(); resp.StatusCode != 200 {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, body)
		}
	}
	// 10 s hold 10 of 60 requests, and one more comes each second.
	resp, body := call()
	h := resp.Header
	if resp.StatusCode == 200 {
		t.Skipf("the 10 calls took a second or more, letting an 11th through: %v", h)
	}
	remaining, _ := strconv.Atoi(h.Get("Anthropic-Ratelimit-Requests-Remaining"))
	if resp.StatusCode != 429 || h.Get("Retry-After") != "1" || !strings.Contains(body, "of 60 requests per minute") ||
		h.Get("Anthropic-Ratelimit-Requests-Limit") != "60" || remaining < 50 || remaining > 51 ||
		h.Get("Anthropic-Ratelimit-Input-Tokens-Limit") != "30000" || h.Get("Anthropic-Ratelimit-Output-Tokens-Limit") != "8000" ||
		h.Get("Anthropic-Ratelimit-Tokens-Limit") != "38000" {
		t.Errorf("11th call: %d %v %s", resp.StatusCode, h, body)
	}
	tr.CloseIdleConnections()
	if code, rest, _ := s.stop(t, os.Interrupt); code != 0 {
		t.Errorf("exit %d after SIGINT; stderr %q", code, rest)
	}
}
