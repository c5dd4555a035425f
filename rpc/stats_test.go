package rpc

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// get_session_stats' retries are the retries the session made, counted
// from its events: a retry counts once its call went out, whatever
// auto_retry_end's attempt says (it names the retry a wait over
// retry.maxDelayMs refused, and the pending one abort_retry cancelled).
func TestSessionStatsRetries(t *testing.T) {
	unavailable := provider.Outcome{Message: provider.Failure(503, "503 Service Unavailable", nil)}
	tooLong := provider.Outcome{Message: provider.Failure(429, "429 Too Many Requests", map[string]string{"retry-after": "600"})}
	waits := provider.Outcome{Message: provider.Failure(429, "429 Too Many Requests", map[string]string{"retry-after": "30"})}
	ok := provider.Outcome{Message: provider.Text("ok")}
	cases := []struct {
		name       string
		maxRetries int
		script     []provider.Outcome
		cancelAt   float64 // abort_retry at the auto_retry_start of this attempt (0: none)
		endAttempt float64 // auto_retry_end's attempt
		retries    float64
	}{
		{"success after 1 retry", 10, []provider.Outcome{unavailable, ok}, 0, 1, 1},
		{"give-up with maxRetries 0", 0, []provider.Outcome{unavailable}, 0, 0, 0},
		{"a first wait over retry.maxDelayMs", 10, []provider.Outcome{tooLong}, 0, 1, 0},
		{"a wait over retry.maxDelayMs after retry 1", 10, []provider.Outcome{unavailable, tooLong}, 0, 2, 1},
		{"give up after 2 retries (maxRetries 2)", 2, []provider.Outcome{unavailable, unavailable, unavailable}, 0, 2, 2},
		{"abort_retry while retry 3/10 waits", 10, []provider.Outcome{unavailable, unavailable, waits}, 3, 3, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			settings := retry.DefaultSettings()
			settings.MaxRetries, settings.BaseDelay = tc.maxRetries, time.Millisecond
			rt, err := musepi.NewRuntime(musepi.WithProvider("p", provider.NewScripted(tc.script...)), musepi.WithRetrySettings(settings))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = rt.Shutdown(ctx)
			})
			out := &syncBuffer{}
			s := &Server{Runtime: rt, SessionOptions: []musepi.SessionOption{musepi.WithModel("p/m")}, Out: out, Log: slog.New(slog.DiscardHandler)}
			r, w := io.Pipe()
			done := make(chan error, 1)
			go func() { done <- s.Serve(context.Background(), r) }()
			send := func(line string) { _, _ = w.Write([]byte(line + "\n")) }

			send(`{"id":"p1","type":"prompt","message":"hello"}`)
			if tc.cancelAt > 0 {
				waitFor(t, out, func(o map[string]any) bool { return o["type"] == "auto_retry_start" && o["attempt"] == tc.cancelAt })
				send(`{"id":"r1","type":"abort_retry"}`)
			}
			waitFor(t, out, func(o map[string]any) bool { return o["type"] == "agent_settled" })
			send(`{"id":"s1","type":"get_session_stats"}`)
			waitFor(t, out, func(o map[string]any) bool { return o["id"] == "s1" })
			w.Close()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			var end map[string]any
			waitFor(t, out, func(o map[string]any) bool {
				if o["type"] == "auto_retry_end" {
					end = o
				}
				return end != nil
			})
			stats := responses(t, out)["s1"]["data"].(map[string]any)
			if stats["retries"] != tc.retries || end["attempt"] != tc.endAttempt {
				t.Errorf("retries %v with auto_retry_end %v; want retries %v, attempt %v", stats["retries"], end, tc.retries, tc.endAttempt)
			}
		})
	}
}
