package rpc

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// A steering message sent while a tool runs joins the running prompt after
// the tool's result, before the next turn (as pi delivers steering); the
// client sees it as a user message of the same agent run.
func TestSteerAtTurnBoundary(t *testing.T) {
	call := &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_TOOL_USE, Content: []*messages.ContentBlock{
		{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "c1", Name: "wait", ArgumentsJson: "{}"}}}}}
	p := provider.NewScripted(provider.Outcome{Message: call}, provider.Outcome{Message: provider.Text("done")})
	toolStarted := make(chan struct{})
	release := make(chan struct{})
	tool := musepi.Tool{Name: "wait", Run: func(ctx context.Context, _ string) (string, error) {
		close(toolStarted)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "waited", nil
	}}
	rt, err := musepi.NewRuntime(musepi.WithProvider("p", p), musepi.WithTools(tool))
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

	send(`{"id":"p1","type":"prompt","message":"use the tool"}`)
	<-toolStarted
	send(`{"id":"s1","type":"steer","message":"also this"}`)
	waitFor(t, out, func(o map[string]any) bool { return o["id"] == "s1" })
	close(release)
	waitFor(t, out, func(o map[string]any) bool { return o["type"] == "agent_settled" })
	w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var end map[string]any
	settled := 0
	for _, l := range out.lines() {
		o := map[string]any{}
		_ = json.Unmarshal([]byte(l), &o)
		switch o["type"] {
		case "agent_end":
			end = o
		case "agent_settled":
			settled++
		}
	}
	var roles []string
	for _, m := range end["messages"].([]any) {
		m := m.(map[string]any)
		roles = append(roles, m["role"].(string))
		if m["role"] == "user" && len(roles) > 1 && m["content"] != "also this" {
			t.Errorf("steering message = %v", m)
		}
	}
	want := []string{"user", "assistant", "toolResult", "user", "assistant"}
	if len(roles) != len(want) || settled != 1 {
		t.Fatalf("agent_end roles %v (want %v), %d prompts settled (want 1)", roles, want, settled)
	}
	for i := range want {
		if roles[i] != want[i] {
			t.Fatalf("agent_end roles %v, want %v", roles, want)
		}
	}
}
