// Package examples holds runnable programs that embed MusePi, each a main
// package of its own that runs against the fake LLM server of
// provider/fakellm on loopback (no API key, no network):
//
//	go run ./examples/embed           # one session rides out a 503
//	go run ./examples/team            # a team of sessions shares a runtime and its keys
//	go run ./examples/customprovider  # a hand-written Provider in the runtime
//	go run ./examples/metrics         # metrics on Prometheus /metrics (WithMeterProvider)
//
// examples/cluster holds the configuration files of the 3-node cluster on
// one machine (musepi node; the recipe is in docs/cluster.md and, shortened,
// in the README), which this package's test checks.
//
// The test of this package builds and runs the first three; examples/metrics
// has a test of its own that scrapes its /metrics.
package examples
