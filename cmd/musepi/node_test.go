package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/musepi/musepi/internal/testkit/nodetest"
)

// TestNodeProcesses: three `musepi node` processes on loopback with etcd
// and PostgreSQL join one cluster (node1 serving its metrics with
// --metrics-addr); SIGTERM makes one leave gracefully
// within its bound (the others see it go, its database row is gone);
// kill -9 of another is noticed by the last one through etcd's lease, and
// leaves its row behind for its lease to run out; the last one, SIGTERMed
// with etcd gone, exits at its leave bound.
func TestNodeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, PostgreSQL and three node processes")
	}
	t.Parallel() // mostly waiting on processes
	bin := buildCommand(t)
	env := nodetest.Start(t, bin, nodetest.Options{Extra: "leave_timeout_ms = 5000"})
	start := time.Now()
	n1 := env.StartNode("node1", "--metrics-addr", "127.0.0.1:0")
	n2 := env.StartNode("node2")
	n3 := env.StartNode("node3")
	if err := env.WaitMembers(3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("3 nodes started and joined in %s", time.Since(start).Round(time.Millisecond))
	line, err := n1.WaitLine("musepi node: metrics on ", 0)
	if err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, strings.TrimPrefix(line, "musepi node: metrics on "))
	if fams["go_goroutines"] == nil || !slices.ContainsFunc(slices.Collect(maps.Keys(fams)), func(name string) bool { return strings.HasPrefix(name, "musepi_") }) {
		t.Errorf("node1's /metrics has %d families, want go_goroutines and the runtime's musepi_*", len(fams))
	}

	marks := map[*nodetest.Node]int{n1: n1.Output().Len(), n2: n2.Output().Len()}
	took, err := n3.Term(15 * time.Second)
	if err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if _, err := n3.WaitLine("musepi node: left in", 0); err != nil {
		t.Errorf("node3 did not report leaving: %v", err)
	}
	t.Logf("node3 left gracefully in %s after SIGTERM", took.Round(time.Millisecond))
	if err := env.WaitMembers(2, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the connections to node3 wind down
	for n, mark := range marks {
		if loud := append(nodetest.Logged(n.Output().Since(mark), " WRN "), nodetest.Logged(n.Output().Since(mark), " ERR ")...); len(loud) > 0 {
			t.Errorf("%s logged above INFO while node3 left as planned:\n%s", n.Name, strings.Join(loud, "\n"))
		}
	}
	mark := n1.Output().Len()

	start = time.Now()
	n2.Kill()
	if err := env.WaitMembers(1, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("node1 saw node2's kill -9 after %s (etcd lease)", time.Since(start).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // what node1 logs about the loss, the gossip's retries included
	if loud := append(nodetest.Logged(n1.Output().Since(mark), " WRN "), nodetest.Logged(n1.Output().Since(mark), " ERR ")...); len(loud) != 1 || !strings.Contains(loud[0], "member lost") {
		t.Errorf("node1 logged above INFO about node2's loss:\n%s\nwant one WARN line, member lost", strings.Join(loud, "\n"))
	}

	rows := nodeRows(t, env.DB)
	has := func(name string) bool {
		for _, r := range rows {
			if strings.HasPrefix(r, name+"#") {
				return true
			}
		}
		return false
	}
	if !has("node1") || !has("node2") || has("node3") {
		t.Errorf("musepi_nodes %v: want node1 (running) and node2 (killed), not node3 (left)", rows)
	}

	// With etcd gone, protoactor's leave never returns: the node still
	// exits at its bound, with an error.
	if err := env.Etcd.Stop(); err != nil {
		t.Fatal(err)
	}
	took, err = n1.Term(20 * time.Second)
	if err == nil || !strings.Contains(n1.Output().String(), "musepi node: leave: not done within 5s") {
		t.Errorf("node1 SIGTERM without etcd: %v after %s; want exit 1 at the 5 s bound, saying so:\n%s", err, took, n1.Output())
	}
	t.Logf("node1 without etcd: exited %s after SIGTERM (leave_timeout_ms 5000)", took.Round(time.Millisecond))
}

// nodeRows are the node column of musepi_nodes.
func nodeRows(t *testing.T, url string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT node FROM musepi_nodes ORDER BY node")
	var names []string
	if err == nil {
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: no node has made the schema yet
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// A node that cannot start says why in its last line, prefixed "musepi
// node: ", and exits 1.
func TestNodeCommandErrors(t *testing.T) {
	t.Setenv("MUSEPI_CMD_TEST_KEY", "sk-test")
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	closed := nodetest.FreePort(t) // nobody listens there
	noDB := strings.Replace(clusterTable, "127.0.0.1:5432", fmt.Sprintf("127.0.0.1:%d", closed), 1)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no [cluster] table", []string{"--config", write("single.toml", goodConfig)}, "musepi node: " + filepath.Join(dir, "single.toml") + " has no [cluster] table"},
		{"an invalid [cluster] table", []string{"--config", write("bad.toml", goodConfig+strings.Replace(clusterTable, `name = "dev"`, `name = "a/b"`, 1))}, `musepi node: ` + filepath.Join(dir, "bad.toml") + `: cluster.name: must not contain '/' or '@', got "a/b"`},
		{"the database unreachable", []string{"--config", write("nodb.toml", goodConfig+noDB)}, "musepi node: database: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCaptured(t, append([]string{"node"}, tc.args...)...)
			if code != 1 || out != "" || !strings.HasPrefix(lastLine([]byte(errOut)), tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 and stderr %q...", code, out, errOut, tc.want)
			}
		})
	}
}
