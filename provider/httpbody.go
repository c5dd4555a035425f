package provider

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
)

// MaxErrorBody is how much of an HTTP error response body a provider reads:
// enough for the provider's error JSON and retry hints; the rest of the body
// is never read, so a huge error page costs no memory.
const MaxErrorBody = 64 << 10

// MaxStreamEvent bounds one event of a text/event-stream response (8 MiB):
// the SDKs gather an event's data lines until the empty line that ends it,
// so a server that never sends one would grow their buffer without end.
// Events are small, except the final event of an OpenAI Responses stream,
// which repeats the whole response: twice the default response size bound
// (musepi.WithMaxResponseBytes, 4 MiB) leaves room for its JSON.
const MaxStreamEvent = 8 << 20

// BoundedClient returns a copy of c (nil: a client on a clone of
// http.DefaultTransport) whose transport bounds bodies with BoundBodies.
// The SDKs read an error body whole and buffer stream events before a
// provider sees them; bounding them in the transport is the only place
// below them.
func BoundedClient(c *http.Client) *http.Client {
	var out http.Client
	if c != nil {
		out = *c
	}
	next := out.Transport
	if next == nil {
		next = http.DefaultTransport
		if t, ok := next.(*http.Transport); ok {
			next = t.Clone()
		}
	}
	out.Transport = BoundBodies(next)
	return &out
}

// BoundBodies wraps next so that the body of a response with status 400 or
// more holds at most its first MaxErrorBody bytes (the original body is
// closed after reading them, discarding the rest), and reading a
// text/event-stream body fails with ErrStreamEventTooLarge once one event
// passes MaxStreamEvent bytes.
func BoundBodies(next http.RoundTripper) http.RoundTripper {
	return boundedTransport{next: next}
}

type boundedTransport struct{ next http.RoundTripper }

// RoundTrip sends req, unless the guard its context carries (WithGuard)
// says no, and bounds the response's body.
func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := checkGuard(req.Context()); err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, err
	}
	res, err := t.next.RoundTrip(req)
	if err != nil || res.Body == nil {
		return res, err
	}
	if res.StatusCode < 400 {
		if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == "text/event-stream" {
			res.Body = &eventBoundedBody{ReadCloser: res.Body, max: MaxStreamEvent, lineEmpty: true}
		}
		return res, nil
	}
	// A read error keeps what was read: the status matters more than the
	// body, which the provider reports as it finds it.
	prefix, _ := io.ReadAll(io.LimitReader(res.Body, MaxErrorBody))
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(prefix))
	res.ContentLength = int64(len(prefix))
	res.Header.Del("Content-Length")
	return res, nil
}

// CloseIdleConnections passes the call on, so that http.Client's own
// CloseIdleConnections still reaches the wrapped transport.
func (t boundedTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// ErrStreamEventTooLarge is the read error of a stream whose event passed
// MaxStreamEvent bytes.
var ErrStreamEventTooLarge = fmt.Errorf("malformed response stream: an event larger than %d bytes (no empty line ends it)", MaxStreamEvent)

// eventBoundedBody counts the bytes since the last event boundary (an
// empty line; CRs are ignored) and fails once they pass max.
type eventBoundedBody struct {
	io.ReadCloser
	max       int
	since     int
	lineEmpty bool // no byte but CR since the last LF
	err       error
}

func (b *eventBoundedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.ReadCloser.Read(p)
	for _, c := range p[:n] {
		switch {
		case c == '\n' && b.lineEmpty:
			b.since = 0
		case c == '\n':
			b.lineEmpty = true
		case c != '\r':
			b.lineEmpty = false
		}
		b.since++
	}
	if b.since > b.max {
		b.err = ErrStreamEventTooLarge
		return n, b.err
	}
	return n, err
}
