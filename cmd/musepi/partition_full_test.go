//go:build partition

package main

import "time"

// The full run's other cases (clientCutFromHost in partition_test.go). In
// the three cuts of one node, the outage of 6 s fails a prompt's first two
// calls (at 0 and about 4 s) and answers the third (about 8 s): the cut
// comes as the second backoff begins, so the node's leases (3 s) run out
// before the next call is due, and lasts 10 s. The flapping link cuts the
// node with the most sessions for 3 s five times, 3 s apart, from its
// sessions' first backoff on, while a 30 s outage keeps 20 sessions
// backing off.
var (
	hostCutPastLease = partitionCase{name: "host cut off from everything past its lease", kind: isolateHost,
		sessions: 6, outage: 6 * time.Second, backoffs: 2, cuts: 1, down: 10 * time.Second}
	hostCutFromPG = partitionCase{name: "host cut off from PostgreSQL", kind: hostFromPG,
		sessions: 6, outage: 6 * time.Second, backoffs: 2, cuts: 1, down: 10 * time.Second}
	hostCutFromEtcd = partitionCase{name: "host cut off from etcd", kind: hostFromEtcd,
		sessions: 6, outage: 6 * time.Second, backoffs: 2, cuts: 1, down: 10 * time.Second}
	linkFlapping = partitionCase{name: "one node's link flapping 5 × 3 s", kind: isolateHost,
		sessions: 20, outage: 30 * time.Second, backoffs: 1, cuts: 5, down: 3 * time.Second, up: 3 * time.Second}
)

// partitionRun is the full run (go test -race -tags partition -run
// TestClusterPartitions -v ./cmd/musepi): all five cases, each on a fresh
// cluster, about 3 minutes.
var partitionRun = []partitionCase{hostCutPastLease, hostCutFromPG, hostCutFromEtcd, clientCutFromHost, linkFlapping}
