package provider

import (
	"bytes"
	"io"
	"net/http"
)

// MaxErrorBody is how much of an HTTP error response body a provider reads:
// enough for the provider's error JSON and retry hints; the rest of the body
// is never read, so a huge error page costs no memory.
const MaxErrorBody = 64 << 10

// BoundedClient returns a copy of c (nil: a client on a clone of
// http.DefaultTransport) whose transport bounds error bodies with
// BoundErrorBodies. The SDKs read an error body whole before a provider
// sees it; bounding it in the transport is the only place below them.
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
	out.Transport = BoundErrorBodies(next)
	return &out
}

// BoundErrorBodies wraps next so that the body of a response with status
// 400 or more holds at most its first MaxErrorBody bytes; the original body
// is closed after reading them, discarding the rest.
func BoundErrorBodies(next http.RoundTripper) http.RoundTripper {
	return boundedTransport{next: next}
}

type boundedTransport struct{ next http.RoundTripper }

// RoundTrip sends req and bounds an error response's body.
func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if err != nil || res.StatusCode < 400 || res.Body == nil {
		return res, err
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
