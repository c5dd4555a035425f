package provider_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/musepi/musepi/provider"
)

// The guard a request's context carries runs just before the request is
// sent: its error is the request's, and nothing reaches the server.
func TestGuardKeepsTheRequestFromBeingSent(t *testing.T) {
	var seen atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { seen.Add(1) }))
	defer srv.Close()
	c := provider.BoundedClient(srv.Client())
	errTaken := errors.New("taken")
	tests := []struct {
		name  string
		guard func(context.Context) error // nil: no guard
		err   error
		seen  int32
	}{
		{"no guard", nil, nil, 1},
		{"a guard that allows it", func(context.Context) error { return nil }, nil, 1},
		{"a guard that refuses", func(context.Context) error { return errTaken }, errTaken, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen.Store(0)
			ctx := context.Background()
			if tc.guard != nil {
				ctx = provider.WithGuard(ctx, tc.guard)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Do(req)
			if err == nil {
				res.Body.Close()
			}
			if !errors.Is(err, tc.err) || tc.err == nil && err != nil || seen.Load() != tc.seen {
				t.Errorf("err %v, requests seen %d; want %v, %d", err, seen.Load(), tc.err, tc.seen)
			}
		})
	}
}
