package main

import (
	"context"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// nopProvider answers every request with an empty message.
type nopProvider struct{}

func (nopProvider) Stream(context.Context, provider.Request, func(provider.Delta)) *messages.AssistantMessage {
	return &messages.AssistantMessage{}
}

func (nopProvider) ResetSession(string) {}

// The node providers tell the sessions the node that left served last
// (moved: counted at their first request from another node) from the
// others (counted at their first request after the leave).
func TestNodeProvidersTellMovedFromStayed(t *testing.T) {
	n := &nodeProviders{last: make([]int32, 4)}
	nodes := []provider.Provider{n.node(nopProvider{}, 0), n.node(nopProvider{}, 1), n.node(nopProvider{}, 2)}
	send := func(session string, node int) {
		nodes[node].Stream(context.Background(), provider.Request{SessionID: session}, nil)
	}
	send("0", 2) // session 0 on node 3, the one that leaves
	send("1", 0)
	send("2", 2)
	// session 3 never sent before the leave
	n.leave(2, time.Now().Add(-time.Second))
	send("0", 2) // a turn still answered by the leaving node: not moved yet
	send("0", 1) // moved to node 2
	send("0", 0) // later requests do not count again
	send("1", 1) // another node than before, but it was not on the leaving one
	send("3", 0) // no request before the leave: neither
	moved, stayed := n.afterLeave()
	if len(moved) != 1 || len(stayed) != 1 {
		t.Fatalf("moved %v, stayed %v; want one each (session 2 never came back)", moved, stayed)
	}
	if moved[0] < time.Second || stayed[0] < time.Second {
		t.Errorf("delays %v, %v; want at least the second since the leave", moved[0], stayed[0])
	}
}

func TestClusterRatiosCompareWithTheSingleNode(t *testing.T) {
	systems := []System{
		{Name: "musepi", Figures: map[string]float64{"cpu_us_per_attempt": 10, "requests_outage": 100, "attempts_per_second": 50}},
		{Name: "musepi-cluster-3", Figures: map[string]float64{"cpu_us_per_attempt": 25, "requests_outage": 90, "attempts_per_second": 40}},
	}
	got := map[string]float64{}
	for _, r := range ratios(systems) {
		got[r.Label] = r.Value
	}
	for label, want := range map[string]float64{
		"CPU per attempt, musepi-cluster-3 / musepi":                     2.5,
		"provider requests during the outage, musepi-cluster-3 / musepi": 0.9,
		"retry attempts per wall-second, musepi-cluster-3 / musepi":      0.8,
	} {
		if v, ok := got[label]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v; all: %v", label, v, ok, want, got)
		}
	}
	if s := singleNodeOf("musepi-cluster-3-budget-on"); s != "musepi-budget-on" {
		t.Errorf("singleNodeOf(budget on) = %q", s)
	}
}
