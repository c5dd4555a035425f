package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// lineWatch is an Out that hands every line written to a channel too.
type lineWatch struct {
	syncBuffer
	mu    sync.Mutex
	lines chan map[string]any
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		var obj map[string]any
		if json.Unmarshal([]byte(line), &obj) == nil {
			w.lines <- obj
		}
	}
	return w.syncBuffer.Write(p)
}

// A client that sends its next prompt as soon as it reads agent_end (what
// pi's RpcClient.waitForIdle waits for) gets it accepted: the prompt has
// settled in the session by then, and the server never answers "a prompt
// is already running" for it.
func TestPromptRightAfterAgentEnd(t *testing.T) {
	const prompts = 200
	out := &lineWatch{lines: make(chan map[string]any, 1024)}
	s := newServer(t, &out.syncBuffer)
	s.Out = out
	in, feed := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), in) }()
	send := func(i int) {
		if _, err := fmt.Fprintf(feed, `{"id":"%d","type":"prompt","message":"hi %d"}`+"\n", i, i); err != nil {
			t.Fatal(err)
		}
	}
	send(0)
	sent, deadline := 1, time.After(60*time.Second)
	for sent < prompts {
		select {
		case obj := <-out.lines:
			switch {
			case obj["type"] == "response" && obj["success"] != true:
				t.Fatalf("prompt %v refused: %v", obj["id"], obj["error"])
			case obj["type"] == "agent_end" && obj["willRetry"] == false:
				send(sent)
				sent++
			}
		case <-deadline:
			t.Fatalf("%d prompts sent in 60 s", sent)
		}
	}
	feed.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	close(out.lines)
	for obj := range out.lines {
		if obj["type"] == "response" && obj["success"] != true {
			t.Fatalf("prompt %v refused: %v", obj["id"], obj["error"])
		}
	}
}
