package anthropic

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

func TestHTTPErrors(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		typ, msg string
		headers  map[string]string
		wantText string
		want     retry.Class
	}{
		{"529 overloaded", 529, "overloaded_error", "Overloaded", nil,
			"529: overloaded_error: Overloaded", retry.Transient},
		{"429 rate limit", 429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit",
			map[string]string{"Retry-After": "7", "Retry-After-Ms": "6500", "Anthropic-Ratelimit-Requests-Remaining": "0"},
			"429 Too Many Requests: rate_limit_error: Number of request tokens has exceeded your per-minute rate limit", retry.Transient},
		{"500 api error", 500, "api_error", "Internal server error", nil,
			"500 Internal Server Error: api_error: Internal server error", retry.Transient},
		{"401 authentication", 401, "authentication_error", "invalid x-api-key", nil,
			"401 Unauthorized: authentication_error: invalid x-api-key", retry.NotRetryable},
		{"400 prompt too long", 400, "invalid_request_error", "prompt is too long: 213462 tokens > 200000 maximum", nil,
			"400 Bad Request: invalid_request_error: prompt is too long: 213462 tokens > 200000 maximum", retry.ContextOverflow},
		{"400 invalid request", 400, "invalid_request_error", "messages: text content blocks must be non-empty", nil,
			"400 Bad Request: invalid_request_error: messages: text content blocks must be non-empty", retry.NotRetryable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
				writeError(w, tt.status, tt.typ, tt.msg, tt.headers)
			})
			msg, rec := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))

			wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
			wantStamped(t, msg, "claude-test")
			if msg.GetErrorMessage() != tt.wantText {
				t.Fatalf("error = %q, want %q", msg.GetErrorMessage(), tt.wantText)
			}
			if int(msg.GetHttpStatus()) != tt.status {
				t.Fatalf("status = %d", msg.GetHttpStatus())
			}
			h := msg.GetHeaders()
			if h["request-id"] != "req_err" || h["content-type"] != "application/json" {
				t.Fatalf("headers = %v", h)
			}
			for k, v := range tt.headers {
				if h[strings.ToLower(k)] != v {
					t.Fatalf("header %s = %q in %v", strings.ToLower(k), h[strings.ToLower(k)], h)
				}
			}
			for k := range h {
				if k != strings.ToLower(k) {
					t.Fatalf("header name %q is not lower-case", k)
				}
			}
			if len(msg.GetContent()) != 0 || len(rec.deltas) != 0 {
				t.Fatalf("content %v deltas %v", msg.GetContent(), rec.deltas)
			}
			wantClass(t, msg, tt.want)
			if s.hitCount() != 1 {
				t.Fatalf("server hit %d times", s.hitCount())
			}
		})
	}
}

func TestRateLimitHints(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name    string
		headers map[string]string
		want    retry.Hint
	}{
		{"retry-after-ms wins", map[string]string{"Retry-After": "7", "Retry-After-Ms": "6500"}, retry.Hint{Delay: 6500 * time.Millisecond, Source: "retry-after-ms"}},
		{"retry-after seconds", map[string]string{"Retry-After": "3"}, retry.Hint{Delay: 3 * time.Second, Source: "retry-after"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
				writeError(w, 429, "rate_limit_error", "Rate limited", tt.headers)
			})
			msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
			wantClass(t, msg, retry.Transient)
			hint, ok := retry.ParseHint(msg.GetHeaders(), msg.GetErrorMessage(), now)
			if !ok || hint != tt.want {
				t.Fatalf("ParseHint(%v) = %+v, %v; want %+v", msg.GetHeaders(), hint, ok, tt.want)
			}
		})
	}
}

func TestNonJSONErrorBody(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html><body>upstream connect error or disconnect/reset before headers</body></html>"))
	})
	msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
	wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
	want := "502 Bad Gateway: <html><body>upstream connect error or disconnect/reset before headers</body></html>"
	if msg.GetErrorMessage() != want || msg.GetHttpStatus() != 502 {
		t.Fatalf("error %q status %d", msg.GetErrorMessage(), msg.GetHttpStatus())
	}
	wantClass(t, msg, retry.Transient)
}

func TestSDKRetriesOff(t *testing.T) {
	for _, status := range []int{529, 429, 500} {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			// Headers that would make the SDK retry at once if its retries were on.
			writeError(w, status, "overloaded_error", "Overloaded", map[string]string{"X-Should-Retry": "true", "Retry-After-Ms": "1"})
		})
		msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
		wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
		if s.hitCount() != 1 {
			t.Fatalf("status %d: server hit %d times, want 1", status, s.hitCount())
		}
	}
}

func TestErrorEventBeforeMessageStart(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		writeEvents(w, sse("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	})
	msg, rec := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
	wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
	if msg.GetErrorMessage() != "overloaded_error: Overloaded (stream error before message_start)" {
		t.Fatalf("error = %q", msg.GetErrorMessage())
	}
	if msg.GetHttpStatus() != 200 || msg.GetHeaders()["request-id"] != "req_test" || len(rec.deltas) != 0 {
		t.Fatalf("status %d headers %v", msg.GetHttpStatus(), msg.GetHeaders())
	}
	wantClass(t, msg, retry.Transient)
}

func TestErrorEventAfterMessageStart(t *testing.T) {
	t.Run("after content", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			writeEvents(w, evMessageStart(), evTextStart(0), evText(0, "Half an ans"),
				sse("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
		})
		msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
		wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
		if msg.GetStopDetails().GetType() != "stream_interrupted_after_content" || textOf(msg) != "Half an ans" {
			t.Fatalf("details %v text %q", msg.GetStopDetails(), textOf(msg))
		}
		if !strings.Contains(msg.GetErrorMessage(), "overloaded_error: Overloaded") {
			t.Fatalf("error = %q", msg.GetErrorMessage())
		}
		wantClass(t, msg, retry.NotRetryable)
	})
	t.Run("before content", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			writeEvents(w, evMessageStart(), evTextStart(0),
				sse("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
		})
		msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
		wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
		if msg.GetStopDetails() != nil || len(msg.GetContent()) != 0 {
			t.Fatalf("details %v content %v", msg.GetStopDetails(), msg.GetContent())
		}
		wantClass(t, msg, retry.Transient)
	})
}

func TestConnectionRefused(t *testing.T) {
	p := newProvider(t, "http://"+closedAddr(t), Config{})
	msg, _ := stream(t, p, userRequest("x"))
	wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
	wantStamped(t, msg, "claude-test")
	if !strings.Contains(msg.GetErrorMessage(), "connection refused") || msg.GetHttpStatus() != 0 || msg.GetHeaders() != nil {
		t.Fatalf("error %q status %d headers %v", msg.GetErrorMessage(), msg.GetHttpStatus(), msg.GetHeaders())
	}
	wantClass(t, msg, retry.Transient)
}

func TestStreamCutAfterText(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		hijackAndCut(t, w, evMessageStart(), evTextStart(0), evText(0, "The answer is"), evText(0, " forty"))
	})
	msg, rec := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
	wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
	if msg.GetStopDetails().GetType() != "stream_interrupted_after_content" {
		t.Fatalf("details = %v (error %q)", msg.GetStopDetails(), msg.GetErrorMessage())
	}
	if textOf(msg) != "The answer is forty" || rec.joined("text") != "The answer is forty" {
		t.Fatalf("text %q deltas %+v", textOf(msg), rec.deltas)
	}
	if !strings.Contains(msg.GetErrorMessage(), "unexpected EOF") {
		t.Fatalf("error = %q", msg.GetErrorMessage())
	}
	wantClass(t, msg, retry.NotRetryable)
}

func TestStreamCutAfterToolCallStart(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		hijackAndCut(t, w, evMessageStart(),
			evBlockStart(0, `{"type":"tool_use","id":"toolu_9","name":"bash","input":{}}`),
			evDelta(0, `{"type":"input_json_delta","partial_json":"{\"cmd\":"}`))
	})
	msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
	wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
	if msg.GetStopDetails().GetType() != "stream_interrupted_after_content" || len(msg.GetContent()) != 1 ||
		msg.GetContent()[0].GetToolCall().GetName() != "bash" {
		t.Fatalf("details %v content %v", msg.GetStopDetails(), msg.GetContent())
	}
	wantClass(t, msg, retry.NotRetryable)
}

func TestStreamCutBeforeOutput(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		hijackAndCut(t, w, evMessageStart(), evPing(), evTextStart(0))
	})
	msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
	wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
	if msg.GetStopDetails() != nil || len(msg.GetContent()) != 0 {
		t.Fatalf("details %v content %v", msg.GetStopDetails(), msg.GetContent())
	}
	if !strings.Contains(msg.GetErrorMessage(), "unexpected EOF") || msg.GetHttpStatus() != 200 {
		t.Fatalf("error %q status %d", msg.GetErrorMessage(), msg.GetHttpStatus())
	}
	wantClass(t, msg, retry.Transient)
}

func TestStreamEndsWithoutMessageStop(t *testing.T) {
	t.Run("after text", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			writeEvents(w, evMessageStart(), evTextStart(0), evText(0, "cut"))
		})
		msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
		wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
		if msg.GetStopDetails().GetType() != "stream_interrupted_after_content" || textOf(msg) != "cut" {
			t.Fatalf("details %v text %q", msg.GetStopDetails(), textOf(msg))
		}
		wantClass(t, msg, retry.NotRetryable)
	})
	t.Run("before output", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			writeEvents(w, evMessageStart())
		})
		msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
		wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
		if msg.GetStopDetails() != nil {
			t.Fatalf("details %v", msg.GetStopDetails())
		}
		wantClass(t, msg, retry.Transient)
	})
}

func TestCallerCancelMidStream(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		writeEvents(w, evMessageStart(), evTextStart(0), evText(0, "Once upon"))
		s.wait(r) // an endless stream
	})
	p := newProvider(t, s.URL, Config{RequestTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancelledAt time.Time
	msg := p.Stream(ctx, userRequest("x"), func(d provider.Delta) {
		if d.Kind == "text" && cancelledAt.IsZero() {
			cancelledAt = time.Now()
			cancel()
		}
	})
	if elapsed := time.Since(cancelledAt); cancelledAt.IsZero() || elapsed > time.Second {
		t.Fatalf("returned %v after the cancellation", elapsed)
	}
	wantStop(t, msg, messages.StopReason_STOP_REASON_ABORTED)
	wantStamped(t, msg, "claude-test")
	if textOf(msg) != "Once upon" || msg.GetErrorMessage() != "Request was aborted" {
		t.Fatalf("text %q error %q", textOf(msg), msg.GetErrorMessage())
	}
	if got := retry.Classify(msg, retry.AbortState{User: true}); got != retry.NotRetryable {
		t.Fatalf("Classify = %v", got)
	}
}

func TestCallerCancelBeforeHeaders(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		s.wait(r) // never answers
	})
	p := newProvider(t, s.URL, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(100*time.Millisecond, cancel)
	defer timer.Stop()
	start := time.Now()
	msg := p.Stream(ctx, userRequest("x"), nil)
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Fatalf("took %v", elapsed)
	}
	wantStop(t, msg, messages.StopReason_STOP_REASON_ABORTED)
	if len(msg.GetContent()) != 0 {
		t.Fatalf("content %v", msg.GetContent())
	}
	// A content-less abort carrying only the sentinel is the reason-less abort
	// of the spec, unless the user aborted.
	if got := retry.Classify(msg, retry.AbortState{User: true}); got != retry.NotRetryable {
		t.Fatalf("Classify = %v", got)
	}
}

func TestAlreadyCancelled(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
		writeEvents(w, textStream("end_turn", "x")...)
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msg := newProvider(t, s.URL, Config{}).Stream(ctx, userRequest("x"), nil)
	wantStop(t, msg, messages.StopReason_STOP_REASON_ABORTED)
	if s.hitCount() != 0 {
		t.Fatalf("server hit %d times", s.hitCount())
	}
}

func TestRequestTimeout(t *testing.T) {
	t.Run("stalled before headers", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			s.wait(r)
		})
		start := time.Now()
		msg, _ := stream(t, newProvider(t, s.URL, Config{RequestTimeout: 200 * time.Millisecond}), userRequest("x"))
		if elapsed := time.Since(start); elapsed > 2*time.Second {
			t.Fatalf("took %v", elapsed)
		}
		wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
		if !strings.Contains(msg.GetErrorMessage(), "context deadline exceeded") || msg.GetHttpStatus() != 0 {
			t.Fatalf("error %q status %d", msg.GetErrorMessage(), msg.GetHttpStatus())
		}
		wantClass(t, msg, retry.Transient)
	})
	t.Run("stalled mid-stream before output", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			writeEvents(w, evMessageStart(), evPing())
			s.wait(r)
		})
		msg, _ := stream(t, newProvider(t, s.URL, Config{RequestTimeout: 200 * time.Millisecond}), userRequest("x"))
		wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
		if !strings.Contains(msg.GetErrorMessage(), "context deadline exceeded") || msg.GetStopDetails() != nil {
			t.Fatalf("error %q details %v", msg.GetErrorMessage(), msg.GetStopDetails())
		}
		wantClass(t, msg, retry.Transient)
	})
	t.Run("stalled after text", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
			writeEvents(w, evMessageStart(), evTextStart(0), evText(0, "slow"))
			s.wait(r)
		})
		msg, _ := stream(t, newProvider(t, s.URL, Config{RequestTimeout: 200 * time.Millisecond}), userRequest("x"))
		wantStop(t, msg, messages.StopReason_STOP_REASON_ERROR)
		if !strings.Contains(msg.GetErrorMessage(), "context deadline exceeded") ||
			msg.GetStopDetails().GetType() != "stream_interrupted_after_content" || textOf(msg) != "slow" {
			t.Fatalf("error %q details %v text %q", msg.GetErrorMessage(), msg.GetStopDetails(), textOf(msg))
		}
		wantClass(t, msg, retry.NotRetryable)
	})
}
