package rpc

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
)

// While a retry waits out its backoff, get_state says isStreaming false,
// isRetrying true, and which attempt comes when; queued messages count in
// pendingMessageCount and run after the prompt, in order.
func TestStateDuringBackoffAndQueue(t *testing.T) {
	limited := provider.Failure(429, "429 Too Many Requests: rate limit reached", map[string]string{"retry-after": "30"})
	p := provider.NewScripted(provider.Outcome{Message: limited}, provider.Outcome{Message: provider.Text("ok")})
	rt, err := musepi.NewRuntime(musepi.WithProvider("p", p))
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

	send(`{"id":"p1","type":"prompt","message":"first"}`)
	waitFor(t, out, func(o map[string]any) bool { return o["type"] == "auto_retry_start" })
	send(`{"id":"q1","type":"follow_up","message":"second"}`)
	send(`{"id":"q2","type":"prompt","message":"third","streamingBehavior":"steer"}`)
	send(`{"id":"s1","type":"get_state"}`)
	waitFor(t, out, func(o map[string]any) bool { return o["id"] == "s1" })
	st := responses(t, out)["s1"]["data"].(map[string]any)
	at, _ := st["nextAttemptAt"].(float64)
	if st["isStreaming"] != false || st["isRetrying"] != true || st["retryAttempt"] != float64(1) ||
		time.UnixMilli(int64(at)).Before(time.Now().Add(20*time.Second)) || st["pendingMessageCount"] != float64(2) {
		t.Errorf("state in backoff = %v; want isStreaming false, isRetrying true, retryAttempt 1, nextAttemptAt ~30 s ahead, 2 pending", st)
	}
	send(`{"id":"r1","type":"abort_retry"}`)
	waitFor(t, out, func(o map[string]any) bool { return o["type"] == "agent_settled" && o["generation"] == float64(3) })
	send(`{"id":"s2","type":"get_state"}`)
	send(`{"id":"m1","type":"get_messages"}`)
	w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	resp := responses(t, out)
	st = resp["s2"]["data"].(map[string]any)
	if st["isRetrying"] != false || st["pendingMessageCount"] != float64(0) || st["retryAttempt"] != nil {
		t.Errorf("state after = %v", st)
	}
	var users []string
	for _, m := range resp["m1"]["data"].(map[string]any)["messages"].([]any) {
		if m := m.(map[string]any); m["role"] == "user" {
			users = append(users, m["content"].(string))
		}
	}
	if len(users) != 3 || users[0] != "first" || users[1] != "third" || users[2] != "second" {
		t.Errorf("user messages %q; want first, then the steering message, then the follow-up", users)
	}
}
