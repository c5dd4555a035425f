//go:build !chaos

package main

import "time"

// chaosShort is the normal test run's: 100 sessions through a 20 s
// outage, 40 s of faults. It shares two cores with the whole test
// command, whose load has delayed the member lists' agreement after a
// SIGCONT to 14 s (2-3 s alone; the full run holds the 10 s bound), so it
// allows 20 s.
var chaosShort = chaosPlan{sessions: 100, run: 40 * time.Second, every: 6 * time.Second, pause: 5 * time.Second,
	outage: 20 * time.Second, pgAt: 9 * time.Second, etcdAt: 30 * time.Second, etcdDown: 5 * time.Second,
	agreeWithin: 20 * time.Second}

// chaosRun is the short run in the normal test run (chaosFull with
// -tags chaos).
var chaosRun = chaosShort
