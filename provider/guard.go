package provider

import "context"

// guardKey is the context key of WithGuard.
type guardKey struct{}

// WithGuard returns ctx carrying guard, which the providers' HTTP
// transport (HTTPClient, BoundBodies) calls just before it sends each
// request: an error keeps the request from being sent and is the
// request's error. A session in a cluster passes its history's Hold, so
// that a node paused between its check and the call does not call the
// provider for a session that another node took meanwhile.
func WithGuard(ctx context.Context, guard func(context.Context) error) context.Context {
	return context.WithValue(ctx, guardKey{}, guard)
}

// checkGuard runs the guard that ctx carries (nil without one).
func checkGuard(ctx context.Context) error {
	if g, ok := ctx.Value(guardKey{}).(func(context.Context) error); ok {
		return g(ctx)
	}
	return nil
}
