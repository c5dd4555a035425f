//go:build !chaos

package main

// chaosRun is the short run in the normal test run (see chaosFull for
// -tags chaos).
var chaosRun = chaosShort
