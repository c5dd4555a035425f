package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/config/internal/configtest"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/retry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The files the cases build on (configtest's, shared with clustercfg's
// tests).
const (
	testKeyEnv     = configtest.KeyEnv
	openaiProvider = configtest.OpenAIProvider
)

var doc = configtest.Doc

// problems returns the problems of err, failing the test when err is not
// an *Error.
func problems(t *testing.T, err error) []Problem {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *config.Error", err, err)
	}
	if len(e.Problems) == 0 {
		t.Fatal("*Error without problems")
	}
	return e.Problems
}

func TestValidationErrors(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	t.Setenv("MUSEPI_TEST_EMPTY", "  ")
	t.Setenv("MUSEPI_TEST_NEWLINE_KEY", "sk-first-half\nsk-second-half\n")
	os.Unsetenv("MUSEPI_TEST_UNSET")
	cred := func(name, env string) string {
		return "\n  [[providers.openai.credentials]]\n  name = \"" + name + "\"\n  api_key_env = \"" + env + "\"\n"
	}
	cases := []struct {
		name            string
		top, prov, rest string
		key, msg        string // a problem with exactly this key whose message contains msg
		only            bool   // and no other problem
	}{
		// Syntax, unknown keys and types.
		{name: "syntax", top: `default_model = "openai/gpt-4o`, key: "", msg: "invalid TOML at line 1", only: true},
		{name: "unknown top-level key", top: "default_model = \"openai/gpt-4o\"\ncolour = true", key: "colour", msg: "unknown key (allowed: auto_redeem, default_model, history_dir, history_sync, max_response_bytes, overload, pacing, pacing_sticky_wait_ms, passivate_after_ms, providers, request_timeout_ms, retry, stream_idle_timeout_ms)", only: true},
		{name: "unknown key with a hint", rest: "[retry]\nmaxRetries = 3", key: "retry.maxRetries", msg: `unknown key (did you mean "max_retries"?)`, only: true},
		{name: "wrong case is unknown", top: `Default_Model = "openai/gpt-4o"`, key: "Default_Model", msg: `did you mean "default_model"?`},
		{name: "unknown provider key", prov: openaiProvider, rest: "[providers.openai.extra]\na = 1", key: "providers.openai.extra", msg: "unknown key (allowed: base_url, credentials, input_tpm, kind, max_tokens, models, output_tpm, prices, rpm, tpm)", only: true},
		{name: "negative rpm", prov: "[providers.openai]\nkind = \"openai\"\nrpm = -1\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.rpm", msg: "must be 0 or more (a limit per minute; 0: none), got -1", only: true},
		{name: "credential tpm not an integer", prov: openaiProvider + "  tpm = \"lots\"\n", key: "providers.openai.credentials[0].tpm", msg: "must be an integer", only: true},
		{name: "pacing not a boolean", top: "default_model = \"openai/gpt-4o\"\npacing = \"off\"", key: "pacing", msg: "must be a boolean (true or false), got a string", only: true},
		{name: "unknown credential key", prov: openaiProvider + "  banked = 1\n", key: "providers.openai.credentials[0].banked", msg: `did you mean "banked_resets"?`, only: true},
		{name: "api key in a credential", prov: openaiProvider + "  api_key = \"sk-secret\"\n", key: "providers.openai.credentials[0].api_key", msg: "API keys are never read from the file", only: true},
		{name: "api key in a provider", prov: "[providers.openai]\nkind = \"openai\"\napi_key = \"sk-secret\"\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.api_key", msg: "API keys are never read from the file", only: true},
		{name: "budget max_tokens not a number", rest: "[retry.budget]\nenabled = true\nmax_tokens = \"ten\"", key: "retry.budget.max_tokens", msg: "must be a number, got a string", only: true},
		{name: "budget max_tokens too small", rest: "[retry.budget]\nenabled = true\nmax_tokens = 0", key: "retry.budget.max_tokens", msg: "must be 1 to 1000000, got 0"},
		{name: "budget token_ratio zero", rest: "[retry.budget]\nenabled = true\ntoken_ratio = 0", key: "retry.budget.token_ratio", msg: "must be above 0 and at most maxTokens (10), got 0"},
		{name: "budget probe_interval_ms zero", rest: "[retry.budget]\nenabled = true\nprobe_interval_ms = 0", key: "retry.budget.probe_interval_ms", msg: "must be above 0, got 0"},
		{name: "budget release_window_ms negative", rest: "[retry.budget]\nenabled = true\nrelease_window_ms = -1", key: "retry.budget.release_window_ms", msg: "must be 0 or more, got -1"},
		{name: "unknown budget key", rest: "[retry.budget]\nburst = 3", key: "retry.budget.burst", msg: "unknown key (allowed: enabled, max_tokens, probe_interval_ms, release_window_ms, token_ratio)", only: true},
		{name: "unknown retry key", rest: "[retry]\njitter = 0.5", key: "retry.jitter", msg: "unknown key (allowed: base_delay_ms, budget, enabled, fallback_chains", only: true},
		{name: "overload max negative", rest: "[overload]\nmax = -1", key: "overload.max", msg: "must be 0 (the default, 1000) or more, got -1", only: true},
		{name: "overload backoff 1", rest: "[overload]\nenabled = true\nbackoff = 1", key: "overload.backoff", msg: "must be above 0 and below 1 (0: the default, 0.9), got 1", only: true},
		{name: "overload tolerance 1", rest: "[overload]\ntolerance = 1.0", key: "overload.tolerance", msg: "must be above 1 (0: the default, 2), got 1", only: true},
		{name: "overload probe_after_ms negative", rest: "[overload]\nprobe_after_ms = -5", key: "overload.probe_after_ms", msg: "must be 0 (the default, 3000) or more, got -5", only: true},
		{name: "overload initial negative", rest: "[overload]\ninitial = -1", key: "overload.initial", msg: "must be 0 (the default, 100) or more, got -1", only: true},
		{name: "overload window negative", rest: "[overload]\nwindow = -2", key: "overload.window", msg: "must be 0 (the default, 100) or more, got -2", only: true},
		{name: "overload max_queue_wait_ms a float", rest: "[overload]\nmax_queue_wait_ms = 1.5", key: "overload.max_queue_wait_ms", msg: "must be an integer, got a float", only: true},
		{name: "overload max not an integer", rest: "[overload]\nmax = 1.5", key: "overload.max", msg: "must be an integer, got a float", only: true},
		{name: "overload high_priority_fallback without a chain", rest: "[overload]\nhigh_priority_fallback = [\"slow\"]", key: "overload.high_priority_fallback[0]", msg: `role "slow" has no fallback chain (retry.fallback_chains.slow)`, only: true},
		{name: "unknown overload key", rest: "[overload]\nlimit = 1", key: "overload.limit", msg: "unknown key (allowed: backoff, enabled, high_priority_fallback, initial, max, max_queue_wait_ms, probe_after_ms, tolerance, window)", only: true},
		{name: "default_model not a string", top: "default_model = 5", key: "default_model", msg: "must be a string, got an integer", only: true},
		{name: "auto_redeem not a boolean", top: "default_model = \"openai/gpt-4o\"\nauto_redeem = \"yes\"", key: "auto_redeem", msg: "must be a boolean (true or false), got a string", only: true},
		{name: "history_dir a date", top: "default_model = \"openai/gpt-4o\"\nhistory_dir = 2024-01-02", key: "history_dir", msg: "must be a string, got a date-time", only: true},
		{name: "request_timeout_ms a float", top: "default_model = \"openai/gpt-4o\"\nrequest_timeout_ms = 1.5", key: "request_timeout_ms", msg: "must be an integer, got a float", only: true},
		{name: "request_timeout_ms a duration string", top: "default_model = \"openai/gpt-4o\"\nrequest_timeout_ms = \"10s\"", key: "request_timeout_ms", msg: "must be an integer, got a string", only: true},
		{name: "request_timeout_ms out of range", top: "default_model = \"openai/gpt-4o\"\nrequest_timeout_ms = 9223372036855", key: "request_timeout_ms", msg: "out of range", only: true},
		{name: "providers not a table", top: "default_model = \"openai/gpt-4o\"\nproviders = 5", prov: "-", key: "providers", msg: "must be a table, got an integer"},
		{name: "provider not a table", top: "default_model = \"openai/gpt-4o\"\nproviders = { openai = 5 }", prov: "-", key: "providers.openai", msg: "must be a table, got an integer"},
		{name: "kind not a string", prov: "[providers.openai]\nkind = [\"openai\"]\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.kind", msg: "must be a string, got an array", only: true},
		{name: "models not an array", prov: "[providers.openai]\nkind = \"openai\"\nmodels = \"gpt-4o\"\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.models", msg: "must be an array of strings, got a string", only: true},
		{name: "model not a string", prov: "[providers.openai]\nkind = \"openai\"\nmodels = [\"gpt-4o\", 4]\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.models[1]", msg: "must be a string, got an integer", only: true},
		{name: "max_tokens not an integer", prov: openaiProvider, rest: "[providers.openai.max_tokens]", key: "providers.openai.max_tokens", msg: "must be an integer, got a table", only: true},
		{name: "credentials not an array", prov: "[providers.openai]\nkind = \"openai\"\ncredentials = \"MUSEPI_TEST_KEY\"", key: "providers.openai.credentials", msg: "must be an array of tables, got a string", only: true},
		{name: "credential not a table", prov: "[providers.openai]\nkind = \"openai\"\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}, \"x\"]", key: "providers.openai.credentials[1]", msg: "must be a table, got a string", only: true},
		{name: "banked_resets not an integer", prov: openaiProvider + "  banked_resets = true\n", key: "providers.openai.credentials[0].banked_resets", msg: "must be an integer, got a boolean", only: true},
		{name: "retry not a table", top: "default_model = \"openai/gpt-4o\"\nretry = true", key: "retry", msg: "must be a table, got a boolean"},
		{name: "enabled not a boolean", rest: "[retry]\nenabled = 1", key: "retry.enabled", msg: "must be a boolean (true or false), got an integer", only: true},
		{name: "max_retries a string", rest: "[retry]\nmax_retries = \"3\"", key: "retry.max_retries", msg: "must be an integer, got a string", only: true},
		{name: "base_delay_ms out of range", rest: "[retry]\nbase_delay_ms = -9223372036855", key: "retry.base_delay_ms", msg: "out of range", only: true},
		{name: "max_delay_ms a float", rest: "[retry]\nmax_delay_ms = 3e5", key: "retry.max_delay_ms", msg: "must be an integer, got a float", only: true},
		{name: "model_fallback a string", rest: "[retry]\nmodel_fallback = \"true\"", key: "retry.model_fallback", msg: "must be a boolean", only: true},
		{name: "policy not a string", rest: "[retry]\nfallback_revert_policy = 1", key: "retry.fallback_revert_policy", msg: "must be a string, got an integer", only: true},
		{name: "fallback_chains not a table", rest: "[retry]\nfallback_chains = [\"openai/gpt-4o\"]", key: "retry.fallback_chains", msg: "must be a table, got an array", only: true},
		{name: "chain not an array", rest: "[retry.fallback_chains]\ndefault = \"openai/gpt-4o\"", key: "retry.fallback_chains.default", msg: "must be an array of strings, got a string", only: true},
		{name: "chain entry not a string", rest: "[retry.fallback_chains]\nslow = [\"openai/gpt-4o\", 1]", key: "retry.fallback_chains.slow[1]", msg: "must be a string, got an integer", only: true},

		// Top-level values.
		{name: "default_model missing", top: "auto_redeem = true", key: "default_model", msg: `required ("provider/model")`, only: true},
		{name: "default_model without provider", top: `default_model = "gpt-4o"`, key: "default_model", msg: `want "provider/model", got "gpt-4o"`, only: true},
		{name: "default_model provider unknown", top: `default_model = "anthropic/claude"`, key: "default_model", msg: `provider "anthropic" is not configured (configured: openai)`, only: true},
		{name: "default_model not listed", top: `default_model = "openai/gpt-5"`, key: "default_model", msg: `model "gpt-5" is not in providers.openai.models (gpt-4o, gpt-4o-mini)`, only: true},
		{name: "request_timeout_ms negative", top: "default_model = \"openai/gpt-4o\"\nrequest_timeout_ms = -1", key: "request_timeout_ms", msg: "must be 0 or more, got -1", only: true},
		{name: "passivate_after_ms negative", top: "default_model = \"openai/gpt-4o\"\npassivate_after_ms = -1", key: "passivate_after_ms", msg: "must be 0 or more, got -1", only: true},
		{name: "stream_idle_timeout_ms negative", top: "default_model = \"openai/gpt-4o\"\nstream_idle_timeout_ms = -1", key: "stream_idle_timeout_ms", msg: "must be 0 or more, got -1", only: true},
		{name: "max_response_bytes negative", top: "default_model = \"openai/gpt-4o\"\nmax_response_bytes = -1", key: "max_response_bytes", msg: "must be 0 or more, got -1", only: true},
		{name: "default_model with NUL", top: `default_model = "openai/gpt-4o\u0000"`, key: "default_model", msg: `model "openai/gpt-4o\x00": control character U+0000`, only: true},
		{name: "model name with a newline", prov: "[providers.openai]\nkind = \"openai\"\nmodels = [\"gpt-4o\", \"gpt\\n4\"]\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.models[1]", msg: "control character U+000A", only: true},
		{name: "credential name with an escape", prov: "[providers.openai]\nkind = \"openai\"\ncredentials = [{name = \"ma\\u001bin\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.credentials[0].name", msg: "control character U+001B", only: true},
		{name: "api key with a newline", prov: openaiProvider + cred("nl", "MUSEPI_TEST_NEWLINE_KEY"), key: "providers.openai.credentials[1].api_key_env", msg: "environment variable MUSEPI_TEST_NEWLINE_KEY holds a newline or other control character inside the key", only: true},
		{name: "history_sync unknown", top: "default_model = \"openai/gpt-4o\"\nhistory_sync = \"always\"", key: "history_sync", msg: `want "turn", "entry" or "none", got "always"`, only: true},
		{name: "history_dir ~user", top: "default_model = \"openai/gpt-4o\"\nhistory_dir = \"~bob/sessions\"", key: "history_dir", msg: `only a leading "~" or "~/" is expanded`, only: true},
		{name: "a cluster table: clustercfg's", rest: "[cluster]\nname = \"dev\"", key: "cluster", msg: "unknown key (allowed: ", only: true},
		{name: "no providers", prov: "-", key: "providers", msg: "at least one provider is required"},
		{name: "no providers: default_model", prov: "-", key: "default_model", msg: `provider "openai" is not configured (no providers are configured)`},

		// Providers.
		{name: "provider name", top: `default_model = "openai/gpt-4o"`, prov: openaiProvider + "[providers.\"my provider\"]\nkind = \"openai\"\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: `providers."my provider"`, msg: "provider name must be letters, digits, '-' or '_'", only: true},
		{name: "kind missing", prov: "[providers.openai]\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.kind", msg: `required ("openai", "openai-responses" or "anthropic")`, only: true},
		{name: "kind unknown", prov: "[providers.openai]\nkind = \"openai-chat\"\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.kind", msg: `unknown kind "openai-chat"`, only: true},
		{name: "base_url not http", prov: "[providers.openai]\nkind = \"openai\"\nbase_url = \"ftp://example.com/v1\"\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.base_url", msg: `want an http:// or https:// URL, got "ftp://example.com/v1"`, only: true},
		{name: "base_url relative", prov: "[providers.openai]\nkind = \"openai\"\nbase_url = \"api.openai.com/v1\"\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.base_url", msg: "want an http:// or https:// URL", only: true},
		{name: "base_url without host", prov: "[providers.openai]\nkind = \"openai\"\nbase_url = \"https:///v1\"\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.base_url", msg: "has no host", only: true},
		{name: "base_url port out of range", prov: "[providers.openai]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:70000/v1\"\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.base_url", msg: `port of URL "http://127.0.0.1:70000/v1" must be 1 to 65535`, only: true},
		{name: "base_url unparsable", prov: "[providers.openai]\nkind = \"openai\"\nbase_url = \"http://[::1\"\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.base_url", msg: `invalid URL "http://[::1"`, only: true},
		{name: "model empty", prov: "[providers.openai]\nkind = \"openai\"\nmodels = [\"gpt-4o\", \"\"]\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.models[1]", msg: "empty model name", only: true},
		{name: "model spaces", prov: "[providers.openai]\nkind = \"openai\"\nmodels = [\"gpt-4o\", \"gpt-4o-mini \"]\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.models[1]", msg: "leading or trailing spaces", only: true},
		{name: "model duplicate", prov: "[providers.openai]\nkind = \"openai\"\nmodels = [\"gpt-4o\", \"gpt-4o\"]\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.models[1]", msg: `duplicate model "gpt-4o" (also models[0])`, only: true},
		{name: "max_tokens negative", prov: "[providers.openai]\nkind = \"openai\"\nmax_tokens = -5\ncredentials = [{name = \"main\", api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.max_tokens", msg: "must be 0 or more, got -5", only: true},
		{name: "credentials missing", prov: "[providers.openai]\nkind = \"openai\"", key: "providers.openai.credentials", msg: "at least one credential is required", only: true},
		{name: "credentials empty", prov: "[providers.openai]\nkind = \"openai\"\ncredentials = []", key: "providers.openai.credentials", msg: "at least one credential is required", only: true},

		// Credentials.
		{name: "credential name missing", prov: "[providers.openai]\nkind = \"openai\"\ncredentials = [{api_key_env = \"MUSEPI_TEST_KEY\"}]", key: "providers.openai.credentials[0].name", msg: "required", only: true},
		{name: "credential name blank", prov: openaiProvider + cred(" ", "MUSEPI_TEST_EMPTY_NOT_USED"), key: "providers.openai.credentials[1].name", msg: "required"},
		{name: "credential name duplicate", prov: openaiProvider + cred("main", "HOME"), key: "providers.openai.credentials[1].name", msg: `duplicate name "main" (also credentials[0])`, only: true},
		{name: "price negative", prov: openaiProvider + "[providers.openai.prices.gpt-4o]\noutput = -1\n", key: "providers.openai.prices.gpt-4o.output", msg: "must be 0 or more, got -1", only: true},
		{name: "price unknown key", prov: openaiProvider + "[providers.openai.prices.gpt-4o]\nreasoning = 1\n", key: "providers.openai.prices.gpt-4o.reasoning", msg: "unknown key (allowed: cache_read, cache_write, input, output)", only: true},
		{name: "price not a number", prov: openaiProvider + "[providers.openai.prices.gpt-4o]\ninput = \"2\"\n", key: "providers.openai.prices.gpt-4o.input", msg: "must be a number", only: true},
		{name: "banked_resets negative", prov: openaiProvider + "  banked_resets = -1\n", key: "providers.openai.credentials[0].banked_resets", msg: "must be 0 or more, got -1", only: true},
		{name: "api_key_env missing", prov: "[providers.openai]\nkind = \"openai\"\ncredentials = [{name = \"main\"}]", key: "providers.openai.credentials[0].api_key_env", msg: "required (the name of the environment variable holding the API key)", only: true},
		{name: "api_key_env not a name", prov: openaiProvider + cred("second", "sk-abc123"), key: "providers.openai.credentials[1].api_key_env", msg: `"sk-abc123" is not an environment variable name`, only: true},
		{name: "api_key_env reused", prov: openaiProvider + cred("second", testKeyEnv), key: "providers.openai.credentials[1].api_key_env", msg: "environment variable MUSEPI_TEST_KEY is already used by credentials[0]", only: true},
		{name: "api_key_env unset", prov: openaiProvider + cred("second", "MUSEPI_TEST_UNSET"), key: "providers.openai.credentials[1].api_key_env", msg: "environment variable MUSEPI_TEST_UNSET is not set", only: true},
		{name: "api_key_env blank", prov: openaiProvider + cred("second", "MUSEPI_TEST_EMPTY"), key: "providers.openai.credentials[1].api_key_env", msg: "environment variable MUSEPI_TEST_EMPTY is empty", only: true},

		// Retry settings.
		{name: "max_retries negative", rest: "[retry]\nmax_retries = -1", key: "retry.max_retries", msg: "must be 0 or more, got -1", only: true},
		{name: "base_delay_ms negative", rest: "[retry]\nbase_delay_ms = -500", key: "retry.base_delay_ms", msg: "must be 0 or more, got -500", only: true},
		{name: "policy unknown", rest: "[retry]\nfallback_revert_policy = \"sometimes\"", key: "retry.fallback_revert_policy", msg: `unknown policy "sometimes" (want "cooldown-expiry" or "never")`, only: true},
		{name: "policy in camelCase spelling", rest: "[retry]\nfallback_revert_policy = \"cooldownExpiry\"", key: "retry.fallback_revert_policy", msg: `unknown policy "cooldownExpiry"`, only: true},
		{name: "chain role blank", rest: "[retry.fallback_chains]\n\" \" = [\"openai/gpt-4o\"]", key: `retry.fallback_chains." "`, msg: "empty role name", only: true},
		{name: "chain entry not a selector", rest: "[retry.fallback_chains]\ndefault = [\"openai/gpt-4o-mini\", \"gpt-4o\"]", key: "retry.fallback_chains.default[1]", msg: `want "provider/model", got "gpt-4o"`, only: true},
		{name: "chain entry provider unknown", rest: "[retry.fallback_chains]\ndefault = [\"anthropic/claude-sonnet-4\"]", key: "retry.fallback_chains.default[0]", msg: `provider "anthropic" is not configured (configured: openai)`, only: true},
		{name: "chain entry model not listed", rest: "[retry.fallback_chains]\nslow = [\"openai/o3\"]", key: "retry.fallback_chains.slow[0]", msg: `model "o3" is not in providers.openai.models`, only: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := doc(tc.top, tc.prov, tc.rest)
			cfg, err := Parse([]byte(src))
			if err == nil {
				t.Fatalf("no error for\n%s", src)
			}
			if cfg != nil {
				t.Error("a config came back with the error")
			}
			probs := problems(t, err)
			found := false
			for _, p := range probs {
				if p.Key == tc.key && strings.Contains(p.Message, tc.msg) {
					found = true
				}
			}
			if !found {
				t.Errorf("no problem %q containing %q in\n%v", tc.key, tc.msg, err)
			}
			if tc.only && len(probs) != 1 {
				t.Errorf("want only that problem, got\n%v", err)
			}
			want := tc.msg
			if tc.key != "" {
				want = tc.key + ": "
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error text %q does not name %q", err.Error(), want)
			}
			if strings.Contains(err.Error(), "sk-secret") {
				t.Errorf("error text quotes a secret: %q", err.Error())
			}
		})
	}
}

func TestEveryProblemReportedInOrder(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	os.Unsetenv("OPENAI_API_KEY_2")
	src := `
default_model = "openai/gpt-5"
request_timeout_ms = -3
[providers.openai]
kind = "openai"
models = ["gpt-4o"]
  [[providers.openai.credentials]]
  name = "main"
  api_key_env = "MUSEPI_TEST_KEY"
  [[providers.openai.credentials]]
  name = "second"
  api_key_env = "OPENAI_API_KEY_2"
[retry]
max_retries = -1
base_delay_ms = -1
maxDelayMs = 10
`
	path := filepath.Join(t.TempDir(), "musepi.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if cfg != nil || err == nil {
		t.Fatalf("Load = %v, %v", cfg, err)
	}
	want := []string{
		`default_model: model "gpt-5" is not in providers.openai.models (gpt-4o)`,
		`providers.openai.credentials[1].api_key_env: environment variable OPENAI_API_KEY_2 is not set`,
		`request_timeout_ms: must be 0 or more, got -3`,
		`retry.base_delay_ms: must be 0 or more, got -1`,
		`retry.maxDelayMs: unknown key (did you mean "max_delay_ms"?)`,
		`retry.max_retries: must be 0 or more, got -1`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if lines[i] != path+": "+w {
			t.Errorf("line %d = %q, want %q", i, lines[i], path+": "+w)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.toml")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("default_model = \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad)
	if err == nil || !strings.HasPrefix(err.Error(), bad+": invalid TOML at line 1, column") {
		t.Errorf("syntax error: %v", err)
	}
}

// exampleConfig is the README's example (which must stay valid: see
// TestREADMEExamples).
const exampleConfig = `
default_model = "openai/gpt-4o"     # "provider/model"
auto_redeem = false
history_dir = "~/.local/state/musepi/sessions"   # "" = in memory
history_sync = "turn"                             # fsync after each turn ("entry", "none")
request_timeout_ms = 600000

[providers.openai]
kind = "openai"            # "openai" (chat), "openai-responses", "anthropic"
base_url = "https://api.openai.com/v1"
models = ["gpt-4o", "gpt-4o-mini"]
  [[providers.openai.credentials]]
  name = "main"
  api_key_env = "OPENAI_API_KEY"      # keys are read from env vars named in the file, never from the file

[providers.anthropic]
kind = "anthropic"
  [[providers.anthropic.credentials]]
  name = "main"
  api_key_env = "ANTHROPIC_API_KEY"
  [[providers.anthropic.credentials]]
  name = "backup"                     # a session whose key hits a usage limit switches keys
  api_key_env = "ANTHROPIC_API_KEY_2"

[retry]
enabled = true
max_retries = 10
base_delay_ms = 500
max_delay_ms = 300000
model_fallback = true
fallback_revert_policy = "cooldown-expiry"
  [retry.fallback_chains]
  default = ["anthropic/claude-sonnet-4", "openai/gpt-4o-mini"]
`

func setExampleEnv(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-openai")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-1")
	t.Setenv("ANTHROPIC_API_KEY_2", "sk-ant-2")
}

func TestExample(t *testing.T) {
	setExampleEnv(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	cfg, err := Parse([]byte(exampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		DefaultModel:      "openai/gpt-4o",
		Pacing:            true,
		PacingStickyWait:  2 * time.Second,
		HistoryDir:        "~/.local/state/musepi/sessions",
		HistorySync:       "turn",
		RequestTimeout:    10 * time.Minute,
		StreamIdleTimeout: musepi.DefaultStreamIdleTimeout,
		PassivateAfter:    musepi.DefaultPassivateAfter,
		MaxResponseBytes:  musepi.DefaultMaxResponseBytes,
		Providers: map[string]Provider{
			"openai": {
				Kind: KindOpenAI, BaseURL: "https://api.openai.com/v1", Models: []string{"gpt-4o", "gpt-4o-mini"},
				Credentials: []Credential{{Name: "main", APIKeyEnv: "OPENAI_API_KEY"}},
			},
			"anthropic": {
				Kind: KindAnthropic,
				Credentials: []Credential{
					{Name: "main", APIKeyEnv: "ANTHROPIC_API_KEY"},
					{Name: "backup", APIKeyEnv: "ANTHROPIC_API_KEY_2"},
				},
			},
		},
		Retry: retry.Settings{
			Enabled:              true,
			MaxRetries:           10,
			BaseDelay:            500 * time.Millisecond,
			MaxDelay:             5 * time.Minute,
			ModelFallback:        true,
			FallbackChains:       map[string][]string{"default": {"anthropic/claude-sonnet-4", "openai/gpt-4o-mini"}},
			FallbackRevertPolicy: retry.RevertCooldownExpiry,
			Budget:               retry.DefaultBudgetSettings(),
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("parsed\n%#v\nwant\n%#v", cfg, want)
	}
	if got := cfg.ProviderNames(); !reflect.DeepEqual(got, []string{"anthropic", "openai"}) {
		t.Errorf("ProviderNames = %v", got)
	}
	if dir, err := cfg.HistoryPath(); err != nil || dir != filepath.Join(home, ".local/state/musepi/sessions") {
		t.Errorf("HistoryPath = %q, %v", dir, err)
	}
	// The settings survive the runtime's own wire form.
	back, err := retry.SettingsFromProto(cfg.Retry.Proto())
	if err != nil || !reflect.DeepEqual(back, cfg.Retry) {
		t.Errorf("proto round trip: %#v, %v", back, err)
	}
}

func TestRetrySettingsFromFile(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	t.Run("no retry table keeps the defaults", func(t *testing.T) {
		cfg, err := Parse([]byte(doc("", "", "")))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg.Retry, retry.DefaultSettings()) {
			t.Errorf("retry = %#v", cfg.Retry)
		}
		if cfg.AutoRedeem || cfg.HistoryDir != "" || cfg.RequestTimeout != 0 {
			t.Errorf("top-level defaults: %#v", cfg)
		}
	})
	t.Run("keys left out keep their defaults", func(t *testing.T) {
		cfg, err := Parse([]byte(doc("", "", "[retry]\nmax_retries = 3\nmodel_fallback = false")))
		if err != nil {
			t.Fatal(err)
		}
		want := retry.DefaultSettings()
		want.MaxRetries = 3
		want.ModelFallback = false
		if !reflect.DeepEqual(cfg.Retry, want) {
			t.Errorf("retry = %#v, want %#v", cfg.Retry, want)
		}
	})
	t.Run("every key", func(t *testing.T) {
		cfg, err := Parse([]byte(doc("", "", `[retry]
enabled = false
max_retries = 0
base_delay_ms = 0
max_delay_ms = -1
model_fallback = false
fallback_revert_policy = "never"
fallback_chains = { default = [], smol = ["openai/gpt-4o-mini"], "x.y" = ["openai/gpt-4o"] }

[retry.budget]
enabled = true
max_tokens = 20
token_ratio = 0.5
probe_interval_ms = 100
release_window_ms = 0`)))
		if err != nil {
			t.Fatal(err)
		}
		want := retry.Settings{
			MaxDelay:             -time.Millisecond,
			FallbackChains:       map[string][]string{"default": {}, "smol": {"openai/gpt-4o-mini"}, "x.y": {"openai/gpt-4o"}},
			FallbackRevertPolicy: retry.RevertNever,
			Budget:               retry.BudgetSettings{Enabled: true, MaxTokens: 20, TokenRatio: 0.5, ProbeInterval: 100 * time.Millisecond},
		}
		if !reflect.DeepEqual(cfg.Retry, want) {
			t.Errorf("retry = %#v, want %#v", cfg.Retry, want)
		}
	})
}

func TestOverloadFromFile(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	for _, tc := range []struct {
		name, rest string
		want       Overload
	}{
		{"no table: off", "", Overload{}},
		{"on with the defaults", "[overload]\nenabled = true", Overload{Enabled: true}},
		{"every key", "[overload]\nenabled = true\nmax = 300\ninitial = 20\nbackoff = 0.8\ntolerance = 3\nprobe_after_ms = 500\nwindow = 50\nmax_queue_wait_ms = -1\nhigh_priority_fallback = [\"default\"]\n[retry.fallback_chains]\ndefault = [\"openai/gpt-4o\"]",
			Overload{Enabled: true, Settings: overload.Settings{Max: 300, Initial: 20, Backoff: 0.8, Tolerance: 3,
				ProbeAfter: 500 * time.Millisecond, Window: 50, MaxQueueWait: -time.Millisecond,
				HighPriorityFallback: []string{"default"}}}},
	} {
		cfg, err := Parse([]byte(doc("", "", tc.rest)))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !reflect.DeepEqual(cfg.Overload, tc.want) {
			t.Errorf("%s: %+v; want %+v", tc.name, cfg.Overload, tc.want)
		}
	}
}

func TestHistoryPath(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	home := t.TempDir()
	t.Setenv("HOME", home)
	dir := t.TempDir()
	cases := []struct{ dir, load, parse string }{
		{"", "", ""},
		{"~", home, home},
		{"~/", home, home},
		{"~/state/musepi", filepath.Join(home, "state/musepi"), filepath.Join(home, "state/musepi")},
		{"/var/lib/musepi/", "/var/lib/musepi", "/var/lib/musepi"},
		{"sessions", filepath.Join(dir, "sessions"), "sessions"},
		{"./a/../b", filepath.Join(dir, "b"), "b"},
	}
	for _, tc := range cases {
		src := doc(`default_model = "openai/gpt-4o"`+"\nhistory_dir = \""+tc.dir+"\"", "", "")
		path := filepath.Join(dir, "musepi.toml")
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HistoryDir != tc.dir {
			t.Errorf("HistoryDir = %q, want it as written, %q", cfg.HistoryDir, tc.dir)
		}
		if got, err := cfg.HistoryPath(); err != nil || got != tc.load {
			t.Errorf("Load: history_dir %q: HistoryPath = %q, %v; want %q", tc.dir, got, err, tc.load)
		}
		cfg, err = Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := cfg.HistoryPath(); err != nil || got != tc.parse {
			t.Errorf("Parse: history_dir %q: HistoryPath = %q, %v; want %q", tc.dir, got, err, tc.parse)
		}
	}
}

func TestSecretsFromEnvironment(t *testing.T) {
	srv := startFake(t)
	t.Setenv("MUSEPI_KEY_A", "  key-a\n") // surrounding whitespace is trimmed
	src := `default_model = "fake/m1"
[providers.fake]
kind = "openai"
base_url = "` + srv.base + `/v1"
  [[providers.fake.credentials]]
  name = "a"
  api_key_env = "MUSEPI_KEY_A"
`
	cfg, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if dump := fmt.Sprintf("%#v", cfg); strings.Contains(dump, "key-a") {
		t.Errorf("the config holds the key: %s", dump)
	}

	// The key is read again when the runtime is built.
	t.Setenv("MUSEPI_KEY_A", "key-a2")
	rt, err := cfg.NewRuntime()
	if err != nil {
		t.Fatal(err)
	}
	prompt(t, rt, cfg.DefaultModel)
	shutdown(t, rt)
	if got := srv.Stats().ByKey; got["key-a2"] != 1 || len(got) != 1 {
		t.Errorf("requests by key: %v", got)
	}

	// Nothing starts once the variable is gone.
	os.Unsetenv("MUSEPI_KEY_A")
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "providers.fake.credentials[0].api_key_env: environment variable MUSEPI_KEY_A is not set") {
		t.Errorf("Validate: %v", err)
	}
	if rt, err := cfg.NewRuntime(); rt != nil || err == nil || !strings.Contains(err.Error(), "MUSEPI_KEY_A is not set") {
		t.Errorf("NewRuntime without the key: %v, %v", rt, err)
	}
}

// A credential without a key starts nothing, whatever the provider's kind:
// the variable unset, empty or blank is named, with the provider and the
// credential, by Parse and again by NewRuntime when it changed since (no
// SDK gets an empty key to fill in from OPENAI_API_KEY or
// ANTHROPIC_API_KEY).
func TestEmptyKeyRefused(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	const second = "MUSEPI_TEST_SECOND_KEY"
	for _, kind := range []Kind{KindOpenAI, KindOpenAIResponses, KindAnthropic} {
		src := fmt.Sprintf(`default_model = "p/m"
[providers.p]
kind = %q
credentials = [{name = "main", api_key_env = %q}, {name = "backup", api_key_env = %q}]
`, kind, testKeyEnv, second)
		for _, tc := range []struct {
			name, value string
			set         bool
			want        string
		}{
			{"unset", "", false, "environment variable " + second + " is not set"},
			{"empty", "", true, "environment variable " + second + " is empty"},
			{"blank", " \t", true, "environment variable " + second + " is empty"},
		} {
			t.Run(string(kind)+"/"+tc.name, func(t *testing.T) {
				want := "providers.p.credentials[1].api_key_env: " + tc.want
				t.Setenv(second, "sk-backup")
				cfg, err := Parse([]byte(src))
				if err != nil {
					t.Fatal(err)
				}
				os.Unsetenv(second)
				if tc.set {
					t.Setenv(second, tc.value)
				}
				if rt, err := cfg.NewRuntime(); rt != nil || err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("NewRuntime: %v, %v; want %q", rt, err, want)
				}
				if _, err := Parse([]byte(src)); err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Parse: %v; want %q", err, want)
				}
			})
		}
	}
}

func TestValidateSeesChanges(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	cfg, err := Parse([]byte(doc("", "", "")))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Retry.MaxRetries = -1
	cfg.DefaultModel = "nope/x"
	_, err = cfg.RuntimeOptions()
	probs := problems(t, err)
	if len(probs) != 2 || probs[0].Key != "default_model" || probs[1].String() != "retry.max_retries: must be 0 or more, got -1" {
		t.Errorf("problems %v", probs)
	}
	// A zero Config names what is missing, never panics.
	var zero Config
	probs = problems(t, zero.Validate())
	if len(probs) != 3 {
		t.Errorf("zero config: %v", probs)
	}
}

func TestSnakeField(t *testing.T) {
	for in, want := range map[string]string{
		"retry.maxRetries":                 "retry.max_retries",
		"retry.baseDelayMs":                "retry.base_delay_ms",
		"retry.fallbackRevertPolicy":       "retry.fallback_revert_policy",
		"retry.fallbackChains":             "retry.fallback_chains",
		"retry.fallbackChains.slowRole[2]": "retry.fallback_chains.slowRole[2]",
		"retry":                            "retry",
	} {
		if got := snakeField(in); got != want {
			t.Errorf("snakeField(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestREADMEExamples(t *testing.T) {
	setExampleEnv(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) < 2 {
		t.Fatalf("%d toml blocks in README.md", len(blocks))
	}
	if strings.TrimSpace(string(blocks[0][1])) != strings.TrimSpace(exampleConfig) {
		t.Errorf("README example differs from exampleConfig:\n%s", blocks[0][1])
	}
	for i, b := range blocks {
		if bytes.Contains(b[1], []byte("[cluster]")) {
			continue // clustercfg's (its TestREADMEExamples)
		}
		if _, err := Parse(b[1]); err != nil {
			t.Errorf("README toml block %d: %v", i, err)
		}
	}
}

// fake is a started fakellm server.
type fake struct {
	*fakellm.Server
	base string
}

func startFake(t *testing.T) *fake {
	t.Helper()
	srv := fakellm.New(nil)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("fakellm close: %v", err)
		}
	})
	return &fake{srv, base}
}

func prompt(t *testing.T, rt *musepi.Runtime, model string, opts ...musepi.SessionOption) *musepi.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := rt.NewSession(ctx, append([]musepi.SessionOption{musepi.WithModel(model)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.Prompt(ctx, "hi")
	if err != nil {
		t.Fatalf("%s: %v", model, err)
	}
	if got := msg.Text(); got != fakellm.DefaultText {
		t.Errorf("%s answered %q", model, got)
	}
	return s
}

func shutdown(t *testing.T, rt *musepi.Runtime) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func TestRuntimeFromConfig(t *testing.T) {
	srv := startFake(t)
	t.Setenv("MUSEPI_KEY_CHAT", "key-chat")
	t.Setenv("MUSEPI_KEY_RESP", "key-resp")
	t.Setenv("MUSEPI_KEY_ANT", "key-ant")
	dir := t.TempDir()
	src := `default_model = "chat/m1"
auto_redeem = true
history_dir = "sessions"
request_timeout_ms = 10000

[providers.chat]
kind = "openai"
base_url = "` + srv.base + `/v1"
models = ["m1", "m2"]
credentials = [{ name = "k", api_key_env = "MUSEPI_KEY_CHAT", banked_resets = 1 }]

[providers.resp]
kind = "openai-responses"
base_url = "` + srv.base + `/v1"
max_tokens = 256
credentials = [{ name = "k", api_key_env = "MUSEPI_KEY_RESP" }]

[providers.ant]
kind = "anthropic"
base_url = "` + srv.base + `"
credentials = [{ name = "k", api_key_env = "MUSEPI_KEY_ANT" }]

[retry]
max_retries = 2
base_delay_ms = 10
[retry.fallback_chains]
default = ["ant/claude", "resp/gpt"]

[overload]
enabled = true
max = 50
initial = 60
`
	path := filepath.Join(dir, "musepi.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cfg.RuntimeOptions()
	if err != nil {
		t.Fatal(err)
	}
	// 3 providers, retry settings, auto-redeem, pacing, its sticky wait,
	// stream idle timeout, passivation, max response bytes, the overload
	// limiter, history dir.
	if len(opts) != 12 {
		t.Errorf("%d options", len(opts))
	}
	rt, err := musepi.NewRuntime(opts...)
	if err != nil {
		t.Fatal(err)
	}
	s := prompt(t, rt, cfg.DefaultModel, musepi.WithSessionID("from-config"))
	if !s.AutoRetryEnabled() {
		t.Error("auto-retry off")
	}
	prompt(t, rt, "resp/gpt")
	prompt(t, rt, "ant/claude")
	if n, ok := rt.ConcurrencyLimit(cfg.DefaultModel); !ok || n != 50 {
		t.Errorf("ConcurrencyLimit(%s) = %d, %v; want the file's max, 50 (below initial)", cfg.DefaultModel, n, ok)
	}
	shutdown(t, rt)

	st := srv.Stats()
	for _, api := range []string{fakellm.APIOpenAIChat, fakellm.APIOpenAIResponses, fakellm.APIAnthropic} {
		if st.ByAPI[api] != 1 {
			t.Errorf("requests by API: %v", st.ByAPI)
		}
	}
	if st.ByKey["key-chat"] != 1 || st.ByKey["key-resp"] != 1 || st.ByKey["key-ant"] != 1 {
		t.Errorf("requests by key: %v", st.ByKey)
	}
	if _, err := os.Stat(filepath.Join(dir, "sessions", "from-config.jsonl")); err != nil {
		t.Errorf("history not in the configured directory: %v", err)
	}

	// extra options come last and win: the history goes elsewhere.
	other := t.TempDir()
	rt, err = cfg.NewRuntime(musepi.WithHistoryDir(other))
	if err != nil {
		t.Fatal(err)
	}
	prompt(t, rt, cfg.DefaultModel, musepi.WithSessionID("elsewhere"))
	shutdown(t, rt)
	if _, err := os.Stat(filepath.Join(other, "elsewhere.jsonl")); err != nil {
		t.Errorf("extra WithHistoryDir ignored: %v", err)
	}
}

func TestRuntimeWithoutNetwork(t *testing.T) {
	// A session can be started on the default model without a request.
	setExampleEnv(t)
	t.Setenv("HOME", t.TempDir())
	cfg, err := Parse([]byte(exampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := cfg.NewRuntime()
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, rt)
	s, err := rt.NewSession(context.Background(), musepi.WithModel(cfg.DefaultModel))
	if err != nil {
		t.Fatal(err)
	}
	if s.Model() != "openai/gpt-4o" {
		t.Errorf("model %q", s.Model())
	}
}

func FuzzParse(f *testing.F) {
	f.Setenv(testKeyEnv, "sk-fuzz")
	f.Setenv("HOME", f.TempDir())
	f.Add([]byte(doc("", "", "")))
	f.Add([]byte(doc("", "", "[retry]\nmax_retries = -1\nfallback_chains = { default = [\"openai/gpt-4o-mini\"] }")))
	f.Add([]byte(strings.ReplaceAll(exampleConfig, "API_KEY", "TEST_KEY")))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one", cfg, err)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Problems) == 0 || e.Error() == "" {
				t.Fatalf("error %#v", err)
			}
			if _, again := Parse(data); again == nil || again.Error() != err.Error() {
				t.Fatalf("not deterministic: %v then %v", err, again)
			}
			return
		}
		// A config that parses is valid, every way it is checked.
		if err := cfg.Validate(); err != nil {
			t.Fatalf("parsed but Validate: %v", err)
		}
		if err := cfg.Retry.Validate(); err != nil {
			t.Fatalf("parsed but retry settings: %v", err)
		}
		prov, _, ok := retry.SplitModel(cfg.DefaultModel)
		if _, known := cfg.Providers[prov]; !ok || !known {
			t.Fatalf("default model %q", cfg.DefaultModel)
		}
		if _, err := cfg.HistoryPath(); err != nil {
			t.Fatalf("HistoryPath: %v", err)
		}
		if _, err := cfg.RuntimeOptions(); err != nil {
			t.Fatalf("RuntimeOptions: %v", err)
		}
	})
}

// TestFuzzSeeds keeps the checked-in seeds meaningful: the valid_* ones
// parse, the others do not.
func TestFuzzSeeds(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-fuzz")
	t.Setenv("HOME", t.TempDir())
	os.Unsetenv("MUSEPI_UNSET_VAR")
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzParse", "*"))
	if err != nil || len(files) < 5 {
		t.Fatalf("seeds: %v, %v", files, err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		header, body, _ := strings.Cut(string(raw), "\n")
		body = strings.TrimSpace(body)
		if header != "go test fuzz v1" || !strings.HasPrefix(body, "[]byte(") || !strings.HasSuffix(body, ")") {
			t.Fatalf("%s: not a corpus file", f)
		}
		data, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(body, "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		_, err = Parse([]byte(data))
		if valid := strings.HasPrefix(filepath.Base(f), "valid_"); valid != (err == nil) {
			t.Errorf("%s: Parse error %v", f, err)
		} else if testing.Verbose() && err != nil {
			t.Logf("%s:\n%v", filepath.Base(f), err)
		}
	}
}

// A key with a newline inside is an error that names the variable and never
// shows the value; surrounding whitespace (a trailing newline) is trimmed.
func TestAPIKeyControlCharacters(t *testing.T) {
	src := "default_model = \"openai/gpt-4o\"\n" + strings.Replace(openaiProvider, testKeyEnv, "MUSEPI_TEST_SECRET", 1)
	t.Setenv("MUSEPI_TEST_SECRET", "sk-trailing-newline\n")
	if _, err := Parse([]byte(src)); err != nil {
		t.Fatalf("a trailing newline is trimmed: %v", err)
	}
	for _, secret := range []string{"sk-part-one\nsk-part-two", "sk-with\rcr", "sk-with\x1bescape"} {
		t.Setenv("MUSEPI_TEST_SECRET", secret)
		_, err := Parse([]byte(src))
		if err == nil || !strings.Contains(err.Error(), "MUSEPI_TEST_SECRET") || strings.Contains(err.Error(), "sk-") {
			t.Errorf("key %q: error %v, want one naming the variable and not showing the value", secret, err)
		}
	}
}

func TestRateLimitsAndPacing(t *testing.T) {
	t.Setenv(testKeyEnv, "sk-test")
	t.Setenv("MUSEPI_TEST_KEY_2", "sk-test-2")
	cfg, err := Parse([]byte(`default_model = "openai/gpt-4o"
pacing = false
pacing_sticky_wait_ms = 500
[providers.openai]
kind = "openai"
rpm = 600
tpm = 200000
  [[providers.openai.credentials]]
  name = "main"
  api_key_env = "MUSEPI_TEST_KEY"
  [[providers.openai.credentials]]
  name = "small"
  api_key_env = "MUSEPI_TEST_KEY_2"
  rpm = 60
  input_tpm = 1000
  output_tpm = 500
`))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Providers["openai"]
	if cfg.Pacing || cfg.PacingStickyWait != 500*time.Millisecond || p.RateLimits != (musepi.RateLimits{RPM: 600, TPM: 200_000}) ||
		p.Credentials[0].RateLimits != (musepi.RateLimits{}) ||
		p.Credentials[1].RateLimits != (musepi.RateLimits{RPM: 60, InputTPM: 1000, OutputTPM: 500}) {
		t.Errorf("pacing %t, provider %+v, credentials %+v", cfg.Pacing, p.RateLimits, p.Credentials)
	}
	if _, err := cfg.RuntimeOptions(); err != nil {
		t.Fatal(err)
	}
}
