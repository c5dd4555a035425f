package integration

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/anthropic"
	"github.com/musepi/musepi/provider/openai"
)

// heapBound is how far the heap may grow over its baseline while a hostile
// server is being talked to.
const heapBound = 64 << 20

// errorBodySize is the error body the hostile server offers per request.
const errorBodySize = 300 << 20

// hostile is a loopback server that counts what it sent.
type hostile struct {
	*httptest.Server
	sent     atomic.Int64 // body bytes written
	requests atomic.Int64
}

// startHostile serves handle on loopback; handle writes through write,
// which counts bytes and reports false once the client has gone.
func startHostile(t *testing.T, handle func(w http.ResponseWriter, write func(string) bool)) *hostile {
	t.Helper()
	h := &hostile{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		flusher, _ := w.(http.Flusher)
		handle(w, func(s string) bool {
			if r.Context().Err() != nil {
				return false
			}
			n, err := io.WriteString(w, s)
			h.sent.Add(int64(n))
			if flusher != nil {
				flusher.Flush()
			}
			return err == nil
		})
	}))
	t.Cleanup(h.Close)
	return h
}

// heapPeak runs f while sampling the heap every millisecond and returns the
// heap before f (after a GC) and the highest heap seen while it ran.
func heapPeak(f func()) (base, peak uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	runtime.GC()
	base = read()
	var peakSeen atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if v := read(); v > peakSeen.Load() {
				peakSeen.Store(v)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	if v := read(); v > peakSeen.Load() {
		peakSeen.Store(v)
	}
	return base, peakSeen.Load()
}

// hostileAPIs builds each real provider against a hostile server.
var hostileAPIs = []struct {
	name  string
	build func(base string) provider.Provider
	// stream writes an endless stream of text deltas of about 1 KiB.
	stream func(write func(string) bool)
}{
	{"openai-chat",
		func(base string) provider.Provider {
			return openai.New(openai.Config{BaseURL: base + "/v1", API: openai.APIChat})
		},
		func(write func(string) bool) {
			chunk := fmt.Sprintf(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", strings.Repeat("talk ", 200))
			for write(chunk) {
			}
		}},
	{"anthropic",
		func(base string) provider.Provider { return anthropic.New(anthropic.Config{BaseURL: base}) },
		func(write func(string) bool) {
			if !write("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n") {
				return
			}
			chunk := fmt.Sprintf("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":%q}}\n\n", strings.Repeat("talk ", 200))
			for write(chunk) {
			}
		}},
}

// A server that streams forever costs a bounded heap: the turn ends at the
// response size bound (WithMaxResponseBytes, default 4 MiB) with an error
// that is not retried.
func TestMemoryEndlessStream(t *testing.T) {
	for _, api := range hostileAPIs {
		t.Run(api.name, func(t *testing.T) {
			srv := startHostile(t, func(w http.ResponseWriter, write func(string) bool) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				api.stream(write)
			})
			rt := newRuntime(t, musepi.WithProvider("llm", api.build(srv.URL), musepi.Credential{Name: "main", APIKey: "key"}),
				musepi.WithRetrySettings(fastRetry()))
			s, events := newSession(t, rt, "llm/m")
			var err error
			base, peak := heapPeak(func() { _, err = prompt(t, s, events, 1, "talk forever") })
			t.Logf("server streamed %.1f MiB in %d request(s); heap %.1f MiB before, peak %.1f MiB (+%.1f MiB)",
				float64(srv.sent.Load())/(1<<20), srv.requests.Load(), mib(base), mib(peak), mib(peak-min(peak, base)))
			if !errors.Is(err, musepi.ErrPromptFailed) || !strings.Contains(err.Error(), "response too large") {
				t.Fatalf("prompt error %v, want the response size error", err)
			}
			if n := srv.requests.Load(); n != 1 {
				t.Errorf("%d requests: the size error must not be retried", n)
			}
			if peak > base+heapBound {
				t.Errorf("heap peaked %.1f MiB over its baseline, bound %.0f MiB", mib(peak-base), mib(heapBound))
			}
		})
	}
}

// A 300 MB error body costs a bounded heap: at most provider.MaxErrorBody
// of it is read, for the error text and retry hints, at every attempt.
func TestMemoryHugeErrorBody(t *testing.T) {
	for _, api := range hostileAPIs {
		t.Run(api.name, func(t *testing.T) {
			srv := startHostile(t, func(w http.ResponseWriter, write func(string) bool) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
				pad := strings.Repeat("overloaded ", 6000) // 66 KB
				sent := 0
				for sent < errorBodySize && write(pad) {
					sent += len(pad)
				}
			})
			rt := newRuntime(t, musepi.WithProvider("llm", api.build(srv.URL), musepi.Credential{Name: "main", APIKey: "key"}),
				musepi.WithRetrySettings(fastRetry()))
			s, events := newSession(t, rt, "llm/m")
			var err error
			start := time.Now()
			base, peak := heapPeak(func() { _, err = prompt(t, s, events, 1, "hello") })
			t.Logf("%d requests, server wrote %.1f MiB of the %d MiB offered each time, in %v; heap %.1f MiB before, peak %.1f MiB (+%.1f MiB)",
				srv.requests.Load(), float64(srv.sent.Load())/(1<<20), errorBodySize>>20, time.Since(start).Round(time.Millisecond),
				mib(base), mib(peak), mib(peak-min(peak, base)))
			if !errors.Is(err, musepi.ErrPromptFailed) || !strings.Contains(err.Error(), "503") {
				t.Fatalf("prompt error %v, want the 503 after its retries", err)
			}
			if n := srv.requests.Load(); n != int64(fastRetry().MaxRetries)+1 {
				t.Errorf("%d requests, want %d (the 503 is retried)", n, fastRetry().MaxRetries+1)
			}
			if peak > base+heapBound {
				t.Errorf("heap peaked %.1f MiB over its baseline, bound %.0f MiB", mib(peak-base), mib(heapBound))
			}
		})
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// A server that streams one event forever (data lines and never the empty
// line that ends an event) costs a bounded heap: the read fails once the
// event passes provider.MaxStreamEvent, and the malformed stream is not
// retried.
func TestMemoryEndlessEvent(t *testing.T) {
	for _, api := range hostileAPIs {
		t.Run(api.name, func(t *testing.T) {
			srv := startHostile(t, func(w http.ResponseWriter, write func(string) bool) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				line := "data: " + strings.Repeat("x", 1000) + "\n"
				for write(line) {
				}
			})
			rt := newRuntime(t, musepi.WithProvider("llm", api.build(srv.URL), musepi.Credential{Name: "main", APIKey: "key"}),
				musepi.WithRetrySettings(fastRetry()))
			s, events := newSession(t, rt, "llm/m")
			var err error
			base, peak := heapPeak(func() { _, err = prompt(t, s, events, 1, "hello") })
			t.Logf("server streamed %.1f MiB in %d request(s); heap %.1f MiB before, peak %.1f MiB (+%.1f MiB)",
				float64(srv.sent.Load())/(1<<20), srv.requests.Load(), mib(base), mib(peak), mib(peak-min(peak, base)))
			if !errors.Is(err, musepi.ErrPromptFailed) || !strings.Contains(err.Error(), "malformed response stream") {
				t.Fatalf("prompt error %v, want the malformed stream error", err)
			}
			if n := srv.requests.Load(); n != 1 {
				t.Errorf("%d requests: a malformed stream must not be retried", n)
			}
			if peak > base+heapBound {
				t.Errorf("heap peaked %.1f MiB over its baseline, bound %.0f MiB", mib(peak-base), mib(heapBound))
			}
		})
	}
}
