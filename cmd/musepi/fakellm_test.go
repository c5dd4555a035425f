package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
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
		{"file limits every key", every, fakellm.Limit{TPM: 9}, nil,
			"--rpm, --tpm: " + every + ": limits[1] already limits every key and model"},
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
