package clustercfg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cluster/pgstore"
)

// Join joins the cluster of c's [cluster] table with the runtime
// the rest of the file describes (its providers, credentials, fallback
// chains and budget configure the shared actors), connecting to the
// cluster's database first. A client (musepi rpc --cluster) is a member
// that hosts no sessions and no shared actors: it binds a free port on
// the file's host, presents the file's [cluster.tls] certificate like its
// node, and its database node name is the file's with "-rpc" appended.
// viewURL is where the node serves the members it sees ("": nowhere),
// published in etcd for `musepi cluster status`.
func (c *Config) Join(ctx context.Context, client bool, viewURL string, log *slog.Logger, opts ...musepi.Option) (*musepi.Runtime, error) {
	cc := c.Cluster
	if cc == nil {
		return nil, fmt.Errorf("%s has no [cluster] table (see config/README.md)", c.File)
	}
	name, port := cc.NodeName, cc.Port
	if client {
		if name == "" {
			name, _ = os.Hostname()
		}
		name, port = name+"-rpc", 0
	}
	sopts := []pgstore.Option{pgstore.WithLease(cc.Lease), pgstore.WithWriteRetry(cc.WriteRetry), pgstore.WithLogger(log)}
	if name != "" {
		sopts = append(sopts, pgstore.WithNode(name))
	}
	rtOpts, err := c.RuntimeOptions(append([]musepi.Option{musepi.WithLogger(log)}, opts...)...)
	if err != nil {
		return nil, err
	}
	join, err := c.ClusterConfig()
	if err != nil {
		return nil, err
	}
	join.Port, join.Client = port, client
	if client {
		join.AdvertiseHost = "" // the file's address is its node's, not this client's
	}
	store, err := pgstore.Connect(ctx, cc.Database(), sopts...)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	join.Store, join.ViewURL = store, viewURL
	rt, err := cluster.Join(ctx, join, rtOpts...)
	if err != nil {
		return nil, errors.Join(err, store.Close())
	}
	return rt, nil
}
