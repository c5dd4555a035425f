package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"

	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cmd/musepi/internal/opsview"
	"github.com/musepi/musepi/config/clustercfg"
)

var sessionsCommand = &command{
	summary:  "list a cluster's sessions: owner, epoch, phase, due time",
	synopsis: []string{"--config FILE [--json] [--timeout D]"},
	about: `
Lists the sessions of the cluster whose database the file's [cluster] table
names, from the database: each one's owner (the node incarnation that took
its epoch), its epoch, how it is held (held; owner left, claimable in N:
held by a node that etcd no longer lists, killed or cut off, whose lease
runs out in N, when the next open takes it over; expired: held by a node
whose lease ran out; released), its phase as its record says (no record,
idle, backoff: sleeping), its retry chain's
attempt, until when it waits, and its history's last seq. It reads only:
plain SELECTs and, with the etcd membership, one etcd Get (over TLS with the
file's [cluster.etcd.tls]); it takes no epoch and claims nothing. It exits 1
when etcd cannot be read, after printing the sessions without the owners
that left. With --json, a JSON array. See docs/cluster.md, "Operating a
cluster".`,
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

// listSessions prints the cluster's sessions, and fails if the database
// or etcd could not be read (after printing the sessions, without etcd).
func listSessions(f opsFlags) error {
	cc, ctx, cancel, err := f.cluster()
	if err != nil {
		return err
	}
	defer cancel()
	var (
		members    []string
		membersErr error
		wg         sync.WaitGroup
	)
	if cc.Membership == clustercfg.MembershipEtcd {
		wg.Go(func() { members, membersErr = storeNodes(ctx, cc) })
	}
	snap, err := snapshot(ctx, cc)
	wg.Wait()
	if err != nil {
		return err
	}
	sessions := opsview.Sessions(snap, members)
	if *f.json {
		err = printJSON(sessions)
	} else {
		err = opsview.WriteSessions(stdout, sessions, snap.Now)
	}
	return errors.Join(err, membersErr)
}

// storeNodes are the database node ids of the members etcd lists (never
// nil when read).
func storeNodes(ctx context.Context, cc *clustercfg.Cluster) ([]string, error) {
	members, err := cluster.EtcdMembers(ctx, cc.EtcdConfig(), cc.Name)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	out := make([]string, 0, len(members))
	for _, m := range members {
		out = append(out, m.Info.StoreNode)
	}
	return out, nil
}
