//go:build chaos

package main

import "time"

// chaosFull is the full chaos run (go test -race -tags chaos -run
// TestClusterChaos -v ./cmd/musepi): 2,000 sessions ride a 75 s provider
// outage through 2 minutes of faults, a node fault about every 15 s (none
// within 10 s of a SIGCONT or while etcd is away), a node paused for 20 s
// at a time, PostgreSQL restarted at 40 s, etcd stopped for 30 s at 70 s;
// max_retries 20 lets a prompt outlast the outage. Member lists must
// agree within 10 s of a SIGCONT.
var chaosFull = chaosPlan{sessions: 2000, run: 2 * time.Minute, every: 15 * time.Second, pause: 20 * time.Second,
	outage: 75 * time.Second, pgAt: 40 * time.Second, etcdAt: 70 * time.Second, etcdDown: 30 * time.Second, retries: 20,
	agreeWithin: 10 * time.Second}

// chaosRun is the full run with -tags chaos.
var chaosRun = chaosFull
