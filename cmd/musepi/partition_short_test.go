//go:build !partition

package main

// partitionRun is the normal test run's: the client's cut alone, about
// 30 s (all five cases with -tags partition).
var partitionRun = []partitionCase{clientCutFromHost}
