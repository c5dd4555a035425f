package main

import (
	"flag"

	"github.com/musepi/musepi/internal/opsview"
)

var sessionsCommand = &command{
	summary:  "list a cluster's sessions: owner, epoch, phase, due time",
	synopsis: []string{"--config FILE [--json] [--timeout D]"},
	about: `
Lists the sessions of the cluster whose database the file's [cluster] table
names, from the database: each one's owner (the node incarnation that took
its epoch), its epoch, how it is held (held; expired: held by a node whose
lease ran out, so the next open takes it over; released), its phase as its
record says (no record, idle, backoff: sleeping, backoff: awaiting_budget,
...), its retry chain's attempt, until when it waits, and its history's last
seq. It reads only: it takes no epoch and claims nothing. With --json, a
JSON array. See docs/cluster.md, "Operating a cluster".`,
	setup: setupSessions,
}

// setupSessions is "musepi sessions --config FILE".
func setupSessions(fs *flag.FlagSet) func([]string) error {
	f := addOpsFlags(fs)
	return func([]string) error {
		if err := f.check(); err != nil {
			return err
		}
		return listSessions(f)
	}
}

// listSessions prints the cluster's sessions.
func listSessions(f opsFlags) error {
	cc, ctx, cancel, err := f.cluster()
	if err != nil {
		return err
	}
	defer cancel()
	snap, err := snapshot(ctx, cc)
	if err != nil {
		return err
	}
	sessions := opsview.Sessions(snap)
	if *f.json {
		return printJSON(sessions)
	}
	return opsview.WriteSessions(stdout, sessions, snap.Now)
}
