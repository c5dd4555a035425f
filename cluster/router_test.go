package cluster_test

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"

	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/messages"
)

// TestRouterAnswersDegradedWhenUnreachable: when no attempt reaches the
// activation in time, the caller still gets an answer (the degraded one),
// after at most RequestAttempts attempts, instead of waiting forever.
func TestRouterAnswersDegradedWhenUnreachable(t *testing.T) {
	cfg := settings(clusterName(t), cluster.InProcess(test.NewInMemAgent()))
	cfg.RequestTimeout, cfg.RequestAttempts = time.Microsecond, 2 // no reply comes back this fast
	m, err := cluster.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Leave() })
	c := newCaller(t, m)
	for _, tc := range []struct {
		name string
		ask  func() any
		ok   func(any) bool
	}{
		{"usage limit: no switch", func() any {
			return c.ask(t, m.Credentials("p"), &messages.MarkUsageLimitReached{SessionId: "s", BlockForMs: 1000, Token: 5})
		}, func(r any) bool {
			u, ok := r.(*messages.UsageLimitReply)
			return ok && !u.GetSwitched() && u.GetToken() == 5
		}},
		// The timed-out mark above reached the actor (A is blocked there, so
		// it would answer B): the first key is the router's own answer.
		{"selection: the first key", func() any {
			return c.ask(t, m.Credentials("p"), &messages.SelectCredential{SessionId: "s"})
		}, func(r any) bool { s, ok := r.(*messages.CredentialSelected); return ok && s.GetCredential() == "A" }},
		// The actor would also grant the due time (its bucket is full):
		// this one checks that a budget request is answered at all.
		{"budget: at the due time", func() any {
			return c.ask(t, m.Credentials("p"), &messages.RetryBudgetRequest{SessionId: "s", Token: 6, DueUnixNano: 42})
		}, func(r any) bool {
			g, ok := r.(*messages.RetryBudgetGrant)
			return ok && g.GetAtUnixNano() == 42 && g.GetToken() == 6
		}},
		{"fallback: no switch", func() any {
			return c.ask(t, m.Fallback("default"), &messages.NextModelRequest{SessionId: "s", Role: "default", Current: "p/m1", Token: 7})
		}, func(r any) bool {
			n, ok := r.(*messages.NextModelReply)
			return ok && !n.GetSwitched() && n.GetFrom() == "p/m1" && n.GetToken() == 7
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := tc.ask(); !tc.ok(r) {
				t.Fatalf("got %v", r)
			}
		})
	}
}
