package fakellm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// contentEvents counts the content chunks of a stream in any API.
func contentEvents(t *testing.T, evs []sseEvent) int {
	t.Helper()
	n := 0
	for _, e := range evs {
		switch e.Event {
		case "content_block_delta", "response.output_text.delta", "response.function_call_arguments.delta",
			"response.reasoning_summary_text.delta":
			if str(e.json(t), "delta", "type") != "signature_delta" {
				n++
			}
		case "":
			if e.Data != "[DONE]" {
				m := e.json(t)
				if str(m, "choices", 0, "delta", "content") != "" || walk(m, "choices", 0, "delta", "tool_calls") != nil {
					n++
				}
			}
		}
	}
	return n
}

// terminal reports whether a stream holds its API's terminating event.
func terminal(evs []sseEvent) bool {
	for _, e := range evs {
		if e.Event == "message_stop" || e.Event == "response.completed" || e.Data == "[DONE]" {
			return true
		}
	}
	return false
}

func isDrop(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		err != nil && strings.Contains(err.Error(), "connection reset")
}

func waitIdle(t *testing.T, srv *Server) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for srv.Stats().Active != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("handler still running after the client left: active=%d", srv.Stats().Active)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCutAfter(t *testing.T) {
	ts := startJSON(t, `{"rules": [
		{"match": {"model": "cut2"}, "respond": {"text": "abcdefgh", "chunks": 4, "cut_after": 2}},
		{"match": {"model": "cut0"}, "respond": {"text": "abcdefgh", "cut_after": 0}},
		{"match": {"model": "cutend"}, "respond": {"text": "abcdefgh", "chunks": 4, "cut_after": 99}}]}`)
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			res := ts.call(req{api: api, model: "cut2", stream: true})
			if res.status != 200 || !isDrop(res.readErr) {
				t.Fatalf("status %d, read error %v (want unexpected EOF / connection reset)", res.status, res.readErr)
			}
			if n := contentEvents(t, res.events); n != 2 || terminal(res.events) {
				t.Errorf("got %d content chunks (want 2), terminal=%v: %q", n, terminal(res.events), names(res.events))
			}

			res = ts.call(req{api: api, model: "cut0", stream: true})
			if !isDrop(res.readErr) || len(res.events) != 0 {
				t.Errorf("cut_after 0: events %q, read error %v", names(res.events), res.readErr)
			}

			res = ts.call(req{api: api, model: "cutend", stream: true})
			if !isDrop(res.readErr) || contentEvents(t, res.events) != 4 || terminal(res.events) {
				t.Errorf("cut before the end: %q, read error %v", names(res.events), res.readErr)
			}
		})
	}
	t.Run("non-streaming", func(t *testing.T) {
		_, err := ts.client.Do(req{api: APIOpenAIChat, model: "cut2"}.httpRequest(t, ts.base))
		if err == nil {
			t.Fatal("want a transport error for a dropped connection")
		}
	})
	if st := ts.srv.Stats(); st.Errors != st.Total {
		t.Errorf("cuts count as errors: %+v", st)
	}
}

func TestStallClientTimeout(t *testing.T) {
	ts := startJSON(t, `{"default": {"text": "never", "stall_ms": 60000}}`)
	for _, api := range apis {
		t.Run(api, func(t *testing.T) {
			client := &http.Client{Transport: ts.client.Transport, Timeout: 300 * time.Millisecond}
			began := time.Now()
			resp, err := client.Do(req{api: api, model: "m", stream: true}.httpRequest(t, ts.base))
			if err != nil {
				t.Fatalf("headers should arrive before the stall: %v", err)
			}
			evs, err := readSSE(resp.Body)
			resp.Body.Close()
			if err == nil || len(evs) != 0 {
				t.Errorf("want a client timeout and no data, got %q, err %v", names(evs), err)
			}
			if d := time.Since(began); d > 5*time.Second {
				t.Errorf("client timeout took %v", d)
			}
			waitIdle(t, ts.srv)
		})
	}
}

func TestStallCloseReturnsPromptly(t *testing.T) {
	srv := New(mustParse(t, `{"default": {"text": "abc", "stall_ms": 60000, "stall_after": 1}}`))
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	type out struct {
		evs []sseEvent
		err error
	}
	done := make(chan out, 1)
	resp, err := client.Do(req{api: APIAnthropic, model: "m", stream: true}.httpRequest(t, base))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer resp.Body.Close()
		evs, err := readSSE(resp.Body)
		done <- out{evs, err}
	}()
	// Wait until the first chunk went out and the stream is stalled.
	deadline := time.Now().Add(3 * time.Second)
	for srv.Stats().Active != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	began := time.Now()
	if err := srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(began); d > time.Second {
		t.Errorf("Close took %v with a stalled stream open", d)
	}
	select {
	case o := <-done:
		if o.err == nil && terminal(o.evs) {
			t.Errorf("stream completed despite Close: %q", names(o.evs))
		}
		if n := contentEvents(t, o.evs); n != 1 {
			t.Errorf("content chunks before the stall: %d, want 1", n)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("client still reading after Close")
	}
	// Closed servers refuse new work.
	if _, err := srv.Start("127.0.0.1:0"); err == nil {
		t.Error("Start after Close succeeded")
	}
}

func TestStallResumes(t *testing.T) {
	ts := startJSON(t, `{"default": {"text": "abc", "stall_ms": 200, "stall_after": 1}}`)
	resp := ts.do(req{api: APIOpenAIChat, model: "m", stream: true})
	defer resp.Body.Close()
	// Time each content chunk's arrival.
	var times []time.Duration
	began := time.Now()
	buf := make([]byte, 0, 4096)
	tmp := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(tmp)
		if n > 0 {
			buf = append(buf, tmp[:n]...)
			for c := strings.Count(string(buf), `"content":"`) - 1; len(times) < c; { // minus the role chunk's empty content
				times = append(times, time.Since(began))
			}
		}
		if err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
	}
	if len(times) != 3 {
		t.Fatalf("content chunks: %d (%s)", len(times), buf)
	}
	if gap := times[1] - times[0]; gap < 180*time.Millisecond {
		t.Errorf("stall gap between chunk 1 and 2: %v, want about 200ms", gap)
	}
	if !strings.Contains(string(buf), "[DONE]") {
		t.Errorf("stream did not complete after the stall")
	}
}

func TestDelayAndChunkDelay(t *testing.T) {
	ts := startJSON(t, `{"rules": [
		{"match": {"model": "delay"}, "respond": {"delay_ms": 150, "status": 503}},
		{"match": {"model": "slow"}, "respond": {"text": "abc", "chunk_delay_ms": 60}}]}`)
	began := time.Now()
	res := ts.call(req{api: APIAnthropic, model: "delay", stream: true})
	if d := time.Since(began); d < 140*time.Millisecond || res.status != 503 {
		t.Errorf("delayed error after %v, status %d", d, res.status)
	}
	began = time.Now()
	res = ts.call(req{api: APIAnthropic, model: "slow", stream: true})
	if d := time.Since(began); d < 170*time.Millisecond || !terminal(res.events) {
		t.Errorf("3 chunks 60 ms apart took %v; events %q", d, names(res.events))
	}
}

func TestClientDisconnectEndsHandler(t *testing.T) {
	ts := startJSON(t, `{"rules": [
		{"match": {"model": "slow"}, "respond": {"text": "abcdef", "chunks": 6, "chunk_delay_ms": 10000}},
		{"match": {"model": "delay"}, "respond": {"delay_ms": 10000}}]}`)
	for _, model := range []string{"slow", "delay"} {
		t.Run(model, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			hr := req{api: APIOpenAIResponses, model: model, stream: true}.httpRequest(t, ts.base).WithContext(ctx)
			errc := make(chan error, 1)
			go func() {
				resp, err := ts.client.Do(hr)
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				errc <- err
			}()
			deadline := time.Now().Add(3 * time.Second)
			for ts.srv.Stats().Active != 1 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			if err := <-errc; err == nil {
				t.Error("want an error after cancelling")
			}
			waitIdle(t, ts.srv)
		})
	}
}

func TestCloseWithoutStartAndTwice(t *testing.T) {
	srv := New(nil)
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	srv2 := New(nil)
	if _, err := srv2.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv2.Start("127.0.0.1:0"); err == nil {
		t.Error("second Start succeeded")
	}
	_ = srv2.Close()
	_ = srv2.Close()
}
