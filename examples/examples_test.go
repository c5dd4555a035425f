package examples

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Each example builds, runs against the fake LLM server on loopback and
// prints what it is about, within a bounded time.
func TestExamplesRun(t *testing.T) {
	tests := []struct {
		dir  string
		want []string // lines the output holds
	}{
		{"embed", []string{
			"retry 1/10 (transient) in ",
			"retry chain over: success=true, retries made: 1",
			"answer: Hello from the fake model.",
			"stop reason: stop, model: openai/gpt-4o-mini",
		}},
		{"team", []string{
			"planner:   done", "researcher: done", "critic:    done", "writer:    done", "reviewer:  done",
			"key A -> key B (usage_limit)",
			"stats: 5 sessions, 0 busy, 0 retrying, credentials blocked map[openai:1]",
		}},
		{"customprovider", []string{
			"retry 1 (transient) in 1s, as the provider's retry-after asked",
			"answer: Answered by the custom provider.",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			exe := example(t, tt.dir)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, exe).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", tt.dir, err, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("%s output lacks %q:\n%s", tt.dir, w, out)
				}
			}
		})
	}
}
