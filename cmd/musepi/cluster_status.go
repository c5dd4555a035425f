package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cmd/musepi/internal/opsview"
	"github.com/musepi/musepi/config/clustercfg"
)

var clusterCommand = &command{
	summary:  "see a cluster's members, their views and the database's leases (musepi cluster status)",
	synopsis: []string{"status --config FILE [--json] [--timeout D]"},
	about:    "Shows the state of the cluster a file's [cluster] table names.",
	commands: map[string]*command{
		"status": {
			summary:  "the members as etcd has them and as each node sees them, the leases, the sessions per node",
			synopsis: []string{"--config FILE [--json] [--timeout D]"},
			about: `
Shows the cluster the file's [cluster] table names: its members as etcd has
them, each with the members it sees (read from its /cluster/members, served
by "musepi node --metrics-addr"; a view that differs from etcd's is flagged,
one that cannot be read says why), and the database's node incarnations with
their leases (live or expired, by the database's clock) and the sessions each
holds. It reads only: one etcd Get (over TLS with the file's
[cluster.etcd.tls]), one HTTP GET per node, plain SELECTs. It exits 1 when
etcd or the database cannot be read, after printing the rest.
With --json, one JSON object. See docs/cluster.md, "Operating a cluster".`,
			setup: setupClusterStatus,
		},
	},
}

// viewTimeout bounds the reading of one node's view: a node that does
// not answer in time (paused, cut off) is reported as not read.
const viewTimeout = 2 * time.Second

// setupClusterStatus is "musepi cluster status --config FILE".
func setupClusterStatus(fs *flag.FlagSet) func([]string) error {
	f := addOpsFlags(fs)
	return func([]string) error {
		if err := f.check(); err != nil {
			return err
		}
		return clusterStatus(f)
	}
}

// clusterStatus reads etcd, the nodes' views and the database, prints
// what they hold, and fails if etcd or the database could not be read.
func clusterStatus(f opsFlags) error {
	cc, ctx, cancel, err := f.cluster()
	if err != nil {
		return err
	}
	defer cancel()
	in := opsview.StatusInput{Cluster: cc.Name, Membership: cc.Membership}
	var wg sync.WaitGroup
	wg.Go(func() { in.Snapshot, in.DatabaseErr = snapshot(ctx, cc) })
	if cc.Membership == clustercfg.MembershipEtcd {
		in.Members, in.MembersErr = cluster.EtcdMembers(ctx, cc.EtcdConfig(), cc.Name)
		if in.MembersErr != nil {
			in.MembersErr = fmt.Errorf("etcd: %w", in.MembersErr)
		}
		in.Views = readViews(ctx, in.Members)
	}
	wg.Wait()
	status := opsview.BuildStatus(in)
	if *f.json {
		err = printJSON(status)
	} else {
		err = status.WriteText(stdout)
	}
	return errors.Join(err, in.MembersErr, in.DatabaseErr)
}

// readViews reads, at once, the view of every member that serves one.
func readViews(ctx context.Context, members []cluster.EtcdMember) map[string]opsview.ViewRead {
	var (
		mu    sync.Mutex
		views = map[string]opsview.ViewRead{}
		wg    sync.WaitGroup
	)
	for _, m := range members {
		if m.Info.ViewURL == "" {
			continue
		}
		wg.Go(func() {
			v, err := readView(ctx, m.Info.ViewURL)
			mu.Lock()
			defer mu.Unlock()
			views[m.Address] = opsview.ViewRead{View: v, Err: err}
		})
	}
	wg.Wait()
	return views
}

// readView GETs the view at url, within viewTimeout.
func readView(ctx context.Context, url string) (*opsview.NodeView, error) {
	ctx, cancel := context.WithTimeout(ctx, viewTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var v opsview.NodeView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return &v, nil
}
