package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With etcd and the database out of reach, the commands that read a
// cluster fail (status 1, every stderr line prefixed), cluster status
// after printing what it could not read. They need no provider key: the
// file's is not in the environment.
func TestOpsCommandsUnreachable(t *testing.T) {
	t.Setenv("MUSEPI_CMD_TEST_KEY", "") // the file's provider key: empty, which Load refuses
	table := strings.NewReplacer("127.0.0.1:5432/musepi", "127.0.0.1:1/musepi?connect_timeout=5", "127.0.0.1:2379", "127.0.0.1:1").
		Replace(clusterTable) + "dial_timeout_ms = 300\n" // in [cluster.etcd]
	path := filepath.Join(t.TempDir(), "node.toml")
	if err := os.WriteFile(path, []byte(goodConfig+table), 0o600); err != nil {
		t.Fatal(err)
	}
	const (
		etcdErr = "etcd: cluster: etcd at [http://127.0.0.1:1]: context deadline exceeded"
		dbErr   = "database: pgstore: inspect: failed to connect to "
	)
	for _, tc := range []struct {
		args   string
		stdout []string // what stdout holds, in order
		errs   []string // the errors on stderr, in order
	}{
		{"cluster status", []string{`Cluster "dev", etcd membership`, "Members: not read: " + etcdErr, "Leases: not read: " + dbErr}, []string{etcdErr, dbErr}},
		{"sessions", nil, []string{dbErr}},
		{"history show", nil, []string{dbErr}},
	} {
		t.Run(tc.args, func(t *testing.T) {
			args := append(strings.Fields(tc.args), "--config", path)
			if tc.args == "history show" {
				args = append(args, "s1")
			}
			code, out, errOut := runCaptured(t, args...)
			if code != 1 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 1", code, out, errOut)
			}
			prefix := "musepi " + tc.args + ": "
			for line := range strings.Lines(errOut) {
				if !strings.HasPrefix(line, prefix) {
					t.Errorf("stderr line %q lacks the prefix %q", line, prefix)
				}
			}
			var wants []string // the errors begin lines, in order (pgx's spans several)
			for _, e := range tc.errs {
				wants = append(wants, "\n"+prefix+e)
			}
			inOrder(t, "\n"+errOut, wants...)
			if tc.stdout == nil && out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			inOrder(t, out, tc.stdout...)
		})
	}
}
