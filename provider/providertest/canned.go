// Package providertest helps test providers without a network: an HTTP
// transport that answers every request with one canned response, and the
// checks every adapter passes against it.
package providertest

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// ContentTypes are Content-Type values worth trying on a provider.
var ContentTypes = []string{
	"text/event-stream",
	"application/json",
	"text/html; charset=utf-8",
	"",
	"text/event-stream; charset=utf-8",
	"text/plain",
}

// CannedTransport is an http.RoundTripper answering every request with
// Status, ContentType and Body; it records the requests (their URL and
// headers) and whether each response body was closed.
type CannedTransport struct {
	Status      int
	ContentType string
	Body        string
	// RequestIDHeader names the response header carrying a request id
	// ("X-Request-Id" for OpenAI, "Request-Id" for Anthropic).
	RequestIDHeader string

	mu       sync.Mutex
	requests []*http.Request // without their bodies
	bodies   []*trackedBody
}

// RoundTrip answers req with the canned response. X-Should-Retry is set, so
// an SDK whose own retries were left on would call again at once.
func (tr *CannedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	body := &trackedBody{r: strings.NewReader(tr.Body)}
	seen := req.Clone(req.Context())
	seen.Body = nil
	tr.mu.Lock()
	tr.requests = append(tr.requests, seen)
	tr.bodies = append(tr.bodies, body)
	tr.mu.Unlock()
	h := http.Header{"X-Should-Retry": {"true"}}
	if tr.RequestIDHeader != "" {
		h.Set(tr.RequestIDHeader, "req_fuzz")
	}
	if tr.ContentType != "" {
		h.Set("Content-Type", tr.ContentType)
	}
	return &http.Response{
		Status:     fmt.Sprintf("%d %s", tr.Status, http.StatusText(tr.Status)),
		StatusCode: tr.Status,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		Body:       body,
		Request:    req,
	}, nil
}

// Paths are the URL paths of the requests so far, in order.
func (tr *CannedTransport) Paths() []string {
	var paths []string
	for _, r := range tr.Requests() {
		paths = append(paths, r.URL.Path)
	}
	return paths
}

// Requests are the requests so far, in order, without their bodies.
func (tr *CannedTransport) Requests() []*http.Request {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]*http.Request(nil), tr.requests...)
}

// BodiesClosed reports whether every response body handed out was closed.
func (tr *CannedTransport) BodiesClosed() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, b := range tr.bodies {
		if !b.isClosed() {
			return false
		}
	}
	return true
}

// trackedBody is an in-memory response body that records its Close.
type trackedBody struct {
	r      *strings.Reader
	mu     sync.Mutex
	closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *trackedBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func (b *trackedBody) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}
