package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/history"
)

// TestTransient: which errors a write retries.
func TestTransient(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return &pgconn.PgError{Severity: "FATAL", Code: code} }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"57P01 admin shutdown", pg("57P01"), true},
		{"57P02 crash shutdown", pg("57P02"), true},
		{"57P03 cannot connect now", pg("57P03"), true},
		{"08000 connection exception", pg("08000"), true},
		{"08003 connection does not exist", pg("08003"), true},
		{"08006 connection failure", pg("08006"), true},
		{"57P03 wrapped in a history.Error", &history.Error{Op: "append", Err: pg("57P03")}, true},
		{"23505 unique violation", pg("23505"), false},
		{"MP001 the fence", pg("MP001"), false},
		{"28P01 bad password", pg("28P01"), false},
		{"57014 query cancelled", pg("57014"), false},
		{"ErrFenced", fmt.Errorf("%w: epoch 3", pgstore.ErrFenced), false},
		{"connection refused", refused, true},
		{"connection reset", fmt.Errorf("read: %w", reset), true},
		{"io.EOF", fmt.Errorf("receive message: %w", io.EOF), true},
		{"io.ErrUnexpectedEOF", io.ErrUnexpectedEOF, true},
		{"conn closed", fmt.Errorf("%w", pgconn.ErrConnClosed), true},
		{"context cancelled", context.Canceled, false},
		{"context deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), false},
		{"anything else", errors.New("encode seq 3: bad"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pgstore.Transient(tc.err); got != tc.want {
				t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestTransientFromPgx: the errors pgx returns for a closed port, a server
// that never answers, a closed connection and a missing database.
func TestTransientFromPgx(t *testing.T) {
	t.Parallel()
	url := server.NewDatabase(t)
	closed := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/x?sslmode=disable", freePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	connect := func(url string) error {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			conn.Close(ctx)
		}
		return err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	_, closedConn := conn.Exec(ctx, "SELECT 1")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a closed port", connect(closed), true},
		{"a server that never answers", connect(pgtest.Silent(t) + "&connect_timeout=1"), true},
		{"a closed connection", closedConn, true},
		{"a missing database", connect(url + "_missing"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("no error")
			}
			if got := pgstore.Transient(tc.err); got != tc.want {
				t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// freePort is a loopback TCP port nobody listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
