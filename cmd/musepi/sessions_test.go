package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
)

// With the database in reach and etcd not, musepi sessions prints the
// sessions, without telling an owner that left (a session held by a node
// with a live lease shows held), then fails (status 1) with etcd's error.
func TestSessionsWithoutEtcd(t *testing.T) {
	t.Parallel()
	url := pgtest.Start(t).NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := pgstore.Connect(ctx, url, pgstore.WithNode("n1"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	log, _, err := store.OpenContext(ctx, "s1") // held by n1, which etcd does not list
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	table := strings.NewReplacer("postgres://postgres@127.0.0.1:5432/musepi", url, "127.0.0.1:2379", "127.0.0.1:1").
		Replace(clusterTable) + "dial_timeout_ms = 300\n" // in [cluster.etcd]
	path := filepath.Join(t.TempDir(), "node.toml")
	if err := os.WriteFile(path, []byte(goodConfig+table), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runOutput(t, buildCommand(t), "sessions", "--config", path)
	rows := tableRows(out)
	want := "musepi sessions: etcd: cluster: etcd at [http://127.0.0.1:1]: context deadline exceeded\n"
	if code != 1 || errOut != want || len(rows) != 2 || rows[1][0] != "s1" || rows[1][3] != "held" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1, s1 held, and %q", code, out, errOut, want)
	}
}
