package pgtest_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/internal/testkit/netnstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A started server serves a new database, as a user other than root, and
// Stop ends it and removes its files.
func TestStartServesADatabaseAndStopRemovesIt(t *testing.T) {
	s := pgtest.Start(t)
	url := s.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var user, dataDir string
	if err := conn.QueryRow(ctx, "SELECT current_user, current_setting('data_directory')").Scan(&user, &dataDir); err != nil {
		t.Fatal(err)
	}
	if user != "postgres" {
		t.Errorf("connected as %q, want postgres", user)
	}
	info, err := os.Stat(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if uid := info.Sys().(*syscall.Stat_t).Uid; os.Geteuid() == 0 && uid == 0 {
		t.Errorf("running as root, the data directory %s is owned by root", dataDir)
	}
	conn.Close(ctx)

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Stop, stat %s = %v, want it gone", dataDir, err)
	}
	if conn, err := pgx.Connect(ctx, url); err == nil {
		conn.Close(ctx)
		t.Error("the server still accepts connections after Stop")
	}
}

// TestStartFromAPrivateDirectory: started from a current directory that
// the server's user cannot enter (a clone in root's home, say), the
// server says nothing about it: initdb and postgres run from the server's
// own directory.
func TestStartFromAPrivateDirectory(t *testing.T) {
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(private)
	s := pgtest.Start(t)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if log := s.Log(); strings.Contains(log, "could not change directory") {
		t.Errorf("the server's output complains about the current directory:\n%s", log)
	}
}

// TestInHost: InHost runs the server in a host's namespace on its
// address, where another host of the network connects without a password.
func TestInHost(t *testing.T) {
	n := netnstest.New(t)
	host, other := n.Add("pg"), n.Add("client")
	s := pgtest.Start(t, pgtest.InHost(host))
	url := s.NewDatabase(t)
	if want := "@" + host.IP() + ":"; !strings.Contains(url, want) {
		t.Fatalf("URL %s, want the host's address %s", url, host.IP())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = other.DialContext
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("from another host: %v", err)
	}
	var from string
	if err := conn.QueryRow(ctx, "SELECT host(inet_client_addr())").Scan(&from); err != nil || from != other.IP() {
		t.Errorf("client address %q (%v), want %s", from, err, other.IP())
	}
	conn.Close(ctx)
}
