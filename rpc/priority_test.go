package rpc

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/musepi/musepi"
)

// A prompt's "priority" sets the session's pacing priority from that
// prompt on; an unknown one is refused with the prompt.
func TestPromptPriority(t *testing.T) {
	out := &syncBuffer{}
	s := newServer(t, out)
	in := strings.Join([]string{
		`{"id":"1","type":"prompt","message":"hi","priority":"urgent"}`,
		`{"id":"2","type":"prompt","message":"hi","priority":"high"}`,
	}, "\n")
	if err := s.Serve(context.Background(), strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	ok := map[string]bool{}
	for _, line := range out.lines() {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		if obj["type"] == "response" {
			ok[obj["id"].(string)] = obj["success"] == true
		}
	}
	if ok["1"] || !ok["2"] {
		t.Errorf("responses ok %v; want the unknown priority refused and high taken", ok)
	}
	if p := s.session.Priority(); p != musepi.High {
		t.Errorf("session priority %v; want high", p)
	}
}
