package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/config/clustercfg"
)

// opsFlags are the flags of the commands that read a cluster's state
// (cluster status, sessions, history show): the configuration file whose
// [cluster] table names the cluster, JSON output, and a bound on reading.
type opsFlags struct {
	config  *string
	json    *bool
	timeout *time.Duration
}

// addOpsFlags declares the flags on fs.
func addOpsFlags(fs *flag.FlagSet) opsFlags {
	return opsFlags{
		config:  fs.String("config", "", "configuration file with a [cluster] table (required; a node's own file does, its TLS tables included: its providers' keys are not needed)"),
		json:    fs.Bool("json", false, "print JSON instead of a table"),
		timeout: fs.Duration("timeout", 10*time.Second, "give up reading after this long"),
	}
}

// check is a usage error without --config or with a timeout that is not
// above zero.
func (f opsFlags) check() error {
	switch {
	case *f.config == "":
		return usagef("--config is required")
	case *f.timeout <= 0:
		return usagef("--timeout must be above 0, got %s", *f.timeout)
	}
	return nil
}

// cluster loads the file's [cluster] table, its TLS files read (the etcd
// client's in its EtcdConfig), and returns a context bounded by --timeout.
func (f opsFlags) cluster() (*clustercfg.Cluster, context.Context, context.CancelFunc, error) {
	cc, err := clustercfg.LoadCluster(*f.config)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *f.timeout)
	return cc, ctx, cancel, nil
}

// inspect opens the cluster's database read-only.
func inspect(ctx context.Context, cc *clustercfg.Cluster) (*pgstore.Inspector, error) {
	in, err := pgstore.Inspect(ctx, cc.Database())
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	return in, nil
}

// snapshot reads the cluster's database.
func snapshot(ctx context.Context, cc *clustercfg.Cluster) (*pgstore.Snapshot, error) {
	in, err := inspect(ctx, cc)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	snap, err := in.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	return snap, nil
}

// printJSON writes v to stdout as indented JSON.
func printJSON(v any) error {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
