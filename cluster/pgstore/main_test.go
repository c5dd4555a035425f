package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/internal/testkit/waiting"
	"github.com/musepi/musepi/messages"
)

// server is one PostgreSQL for the package's tests; each test gets its own
// database, so they run in parallel.
var server pgtest.Shared

// waitingTests is how many tests run at once unless -parallel says
// otherwise: they mostly wait on the server, and each holds a few of its
// 100 connections.
const waitingTests = 4

func TestMain(m *testing.M) {
	if err := waiting.Parallel(waitingTests); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if err := server.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// connect opens a Store on url as node, closed at the end of the test.
func connect(t testing.TB, url, node string, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Connect(context.Background(), url, append([]pgstore.Option{pgstore.WithNode(node)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newStore is a Store on a fresh database.
func newStore(t testing.TB) (*pgstore.Store, string) {
	t.Helper()
	url := server.NewDatabase(t)
	return connect(t, url, "node-a"), url
}

// sql runs a statement on url directly, bypassing the Store.
func sql(t testing.TB, url, stmt string, args ...any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, stmt, args...)
	return err
}

// user is entry seq: a user message saying text.
func user(seq uint64, text string) *messages.Entry {
	return &messages.Entry{Seq: seq, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: text}}}
}

// checkContiguous fails unless entries have seq 1..n.
func checkContiguous(t testing.TB, entries []*messages.Entry) {
	t.Helper()
	for i, e := range entries {
		if e.GetSeq() != uint64(i+1) {
			t.Fatalf("entry %d has seq %d: %v", i, e.GetSeq(), entries)
		}
	}
}
