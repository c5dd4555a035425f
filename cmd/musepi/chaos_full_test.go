//go:build chaos

package main

// chaosRun is the full run with -tags chaos.
var chaosRun = chaosFull
