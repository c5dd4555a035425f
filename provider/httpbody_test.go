package provider_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/musepi/musepi/provider"
)

// A client from BoundedClient reads at most MaxErrorBody bytes of an error
// body, and all of any other body.
func TestBoundedClientErrorBodies(t *testing.T) {
	const size = 1 << 20
	tests := []struct {
		status int
		want   int
	}{
		{200, size},
		{302, size},
		{400, provider.MaxErrorBody},
		{429, provider.MaxErrorBody},
		{503, provider.MaxErrorBody},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "3")
				w.Header().Set("Location", "/elsewhere") // not followed: 302 with no handler loop
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, strings.Repeat("x", size))
			}))
			defer srv.Close()
			c := provider.BoundedClient(&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }})
			defer c.CloseIdleConnections()
			res, err := c.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			if len(body) != tt.want || res.StatusCode != tt.status || res.Header.Get("Retry-After") != "3" {
				t.Errorf("status %d: read %d bytes, retry-after %q; want %d bytes and the headers", res.StatusCode, len(body), res.Header.Get("Retry-After"), tt.want)
			}
		})
	}
}

// BoundedClient keeps the caller's client settings and never changes the
// caller's client.
func TestBoundedClientCopies(t *testing.T) {
	orig := &http.Client{Timeout: 7}
	c := provider.BoundedClient(orig)
	if c == orig || c.Timeout != 7 || orig.Transport != nil {
		t.Fatalf("BoundedClient changed or lost the client: %+v from %+v", c, orig)
	}
}

// A text/event-stream body reads through as long as its events end; an
// event with no empty line after MaxStreamEvent bytes fails the read.
func TestBoundedClientStreamEvents(t *testing.T) {
	line := "data: " + strings.Repeat("x", 1000)
	tests := []struct {
		name    string
		body    func(w io.Writer) // writes about 20 MiB, more than MaxStreamEvent
		wantErr bool
	}{
		{"events end with LF LF", func(w io.Writer) {
			for range 20 << 10 {
				io.WriteString(w, line+"\n\n")
			}
		}, false},
		{"events end with CRLF CRLF", func(w io.Writer) {
			for range 20 << 10 {
				io.WriteString(w, line+"\r\n\r\n")
			}
		}, false},
		{"data lines with no end", func(w io.Writer) {
			for range 20 << 10 {
				io.WriteString(w, line+"\n")
			}
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
				tt.body(w)
			}))
			defer srv.Close()
			c := provider.BoundedClient(nil)
			defer c.CloseIdleConnections()
			res, err := c.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			n, err := io.Copy(io.Discard, res.Body)
			switch {
			case tt.wantErr && !errors.Is(err, provider.ErrStreamEventTooLarge):
				t.Fatalf("read %d bytes, err %v; want ErrStreamEventTooLarge", n, err)
			case tt.wantErr && n > provider.MaxStreamEvent+64<<10:
				t.Fatalf("read %d bytes before the error, want about %d", n, provider.MaxStreamEvent)
			case !tt.wantErr && err != nil:
				t.Fatalf("read %d bytes, err %v", n, err)
			}
		})
	}
}
