package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The example runs and its /metrics shows the team's retries: three
// prompts answered, the two 503s retried, and each usage limit on key A
// followed by a switch to key B; the GenAI conventions' metrics name the
// OpenAI adapter's family, openai, and count the answers' tokens.
func TestExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, "127.0.0.1:0", 0, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	value := func(series string) int {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\d+)$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no %s in the output:\n%s", series, text)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if !strings.HasPrefix(text, "metrics on http://127.0.0.1:") {
		t.Fatalf("output does not start with the metrics address:\n%s", text)
	}
	if n := value(`musepi_prompts_total{outcome="success"}`); n != team {
		t.Errorf("prompts answered: %d, want %d", n, team)
	}
	if n := value(`musepi_retry_attempts_total{class="transient",model="m1",provider="demo"}`); n != 2 {
		t.Errorf("transient retry attempts: %d, want the 2 503s", n)
	}
	if n := value(`musepi_provider_request_errors_total{model="m1",provider="demo",status="503"}`); n != 2 {
		t.Errorf("503 errors: %d, want 2", n)
	}
	limits := value(`musepi_usage_limits_total{model="m1",provider="demo"}`)
	switches := value(`musepi_credential_switches_total{provider="demo",reason="usage_limit"}`)
	if limits == 0 || switches != limits {
		t.Errorf("usage limits %d, credential switches %d: want each limit switched", limits, switches)
	}
	const chat = `gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="m1"`
	if n := value(`gen_ai_client_operation_duration_seconds_count{error_type="503",` + chat + `}`); n != 2 {
		t.Errorf("GenAI operations failed with 503: %d, want 2", n)
	}
	if n := value(`gen_ai_client_token_usage_count{` + chat + `,gen_ai_response_model="m1",gen_ai_token_type="output"}`); n != team {
		t.Errorf("GenAI output token observations: %d, want one per answer, %d", n, team)
	}
}
