//go:build partition

package main

// partitionRun is the full run (go test -race -tags partition -run
// TestClusterPartitions -v ./cmd/musepi): all five cases, each on a fresh
// cluster.
var partitionRun = []partitionCase{hostCutPastLease, hostCutFromPG, hostCutFromEtcd, clientCutFromHost, linkFlapping}
