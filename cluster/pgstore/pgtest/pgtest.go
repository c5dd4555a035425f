// Package pgtest starts a private PostgreSQL server for tests: initdb and
// postgres in a temporary directory, listening on a free loopback port (or
// inside a network namespace of internal/testkit/netnstest, on its host's
// address), run as an unprivileged user when the tests run as root.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/musepi/musepi/internal/testkit/netnstest"
	"github.com/musepi/musepi/internal/testkit/testtool"
)

// ErrNoPostgres is returned by Launch when initdb or postgres cannot be
// found on PATH nor in /usr/lib/postgresql/*/bin.
var ErrNoPostgres = errors.New("PostgreSQL binaries (initdb, postgres) not found on PATH or in /usr/lib/postgresql/*/bin: apt-get install postgresql")

// Bounds on starting and stopping a server.
const (
	startTimeout = 60 * time.Second
	stopTimeout  = 15 * time.Second
)

// Server is a private PostgreSQL server. Its superuser connects without a
// password from loopback only.
type Server struct {
	dir  string // the data directory's parent, removed by Stop
	bin  string // holding postgres
	data string
	cred *syscall.Credential // to run postgres as (nil: this process's user)
	host *netnstest.Host     // where it runs (nil: this process's loopback)
	port int
	cmd  *exec.Cmd
	// exited is closed once the running postgres has exited, with its
	// status in exitErr.
	exited  chan struct{}
	exitErr error
	out     *lockedWriter

	stopOnce sync.Once
	stopped  atomic.Bool
	stopErr  error
	dbs      atomic.Int64 // databases created, for their names
}

// Option configures Launch.
type Option func(*options)

type options struct {
	host *netnstest.Host
}

// InHost runs the server inside host's network namespace, listening on
// the host's address and trusting every address of its subnet (where
// loopback alone is trusted otherwise); this package connects to it from
// the host too.
func InHost(host *netnstest.Host) Option {
	return func(o *options) { o.host = host }
}

// Start launches a server for the test and stops it on t.Cleanup. When the
// binaries are missing it skips the test with one line, or fails it under
// CI (testtool.Missing); it fails it on any other error.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := Launch(context.Background(), opts...)
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s
}

func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoPostgres) {
		testtool.Missing(t, testtool.Postgres, "initdb and postgres not found on PATH or in /usr/lib/postgresql/*/bin")
	}
	t.Fatal(err)
}

// Launch initialises a data directory, starts postgres on a free loopback
// port (of the host's address InHost) and waits until it accepts
// connections, within a minute. Call Stop to end it and remove its files.
func Launch(ctx context.Context, opts ...Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, data, err := initData(ctx, bin, cred, o.host != nil)
	if err != nil {
		return nil, err
	}
	// A free port may be taken by someone else before postgres binds it:
	// try a few.
	var lastErr error
	for range 3 {
		s, err := start(ctx, &Server{dir: dir, bin: bin, data: data, cred: cred, host: o.host})
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// initData makes a directory for the server, owned by cred's user, and
// initialises a data directory in it; with subnet, trusting the clients of
// the server's subnet.
func initData(ctx context.Context, bin string, cred *syscall.Credential, subnet bool) (dir, data string, err error) {
	dir, err = os.MkdirTemp(tempBase(cred), "pgtest-")
	if err != nil {
		return "", "", fmt.Errorf("pgtest: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", "", fmt.Errorf("pgtest: hand %s to the server's user: %w", dir, err)
		}
	}
	data = filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.Dir, initdb.SysProcAttr = dir, &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	if subnet {
		if err := trustSubnet(data); err != nil {
			os.RemoveAll(dir)
			return "", "", err
		}
	}
	return dir, data, nil
}

// trustSubnet lets clients of the server's subnet in without a password,
// as initdb's --auth=trust lets loopback's.
func trustSubnet(data string) error {
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	_, err = hba.WriteString("host all all samenet trust\n")
	return errors.Join(err, hba.Close())
}

// start runs postgres as s says on a free port and waits until it is
// ready.
func start(ctx context.Context, s *Server) (*Server, error) {
	port, err := freePort(s.host)
	if err != nil {
		return nil, err
	}
	s.port, s.out = port, &lockedWriter{}
	if err := s.run(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// run starts postgres on s's port and waits until it is ready.
func (s *Server) run(ctx context.Context) error {
	// Durability is not under test here: fsync off makes the server fast
	// on a shared machine.
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data,
		"-c", "listen_addresses="+s.ip(), "-p", strconv.Itoa(s.port), "-c", "unix_socket_directories=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=100")
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = s.out, s.out
	// SIGQUIT (immediate shutdown) if the test binary dies without Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGQUIT}
	startCmd := cmd.Start
	if s.host != nil {
		startCmd = func() error { return s.host.Start(cmd) }
	}
	if err := startCmd(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	go func() {
		s.exitErr = cmd.Wait()
		close(exited)
	}()
	if err := s.waitReady(ctx); err != nil {
		s.kill()
		return err
	}
	return nil
}

// Restart does what `pg_ctl restart -m fast` does: a fast shutdown (the
// server ends every session with SQLSTATE 57P01 and stops), then a start
// on the same port and data directory; it returns once the server accepts
// connections again. It leaves the server down for down in between (0:
// restart at once). Connections meet refused connects while it is down,
// and SQLSTATE 57P03 while it starts. postgres stays this process's child
// (pg_ctl would detach it), so it still dies with the test binary. Not
// safe to call concurrently with Stop or itself.
func (s *Server) Restart(ctx context.Context, down time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		return fmt.Errorf("pgtest: restart: %w", err)
	}
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		s.kill()
		return fmt.Errorf("pgtest: restart: postgres did not stop within %v; killed it", stopTimeout)
	}
	select {
	case <-time.After(down):
	case <-ctx.Done():
		return fmt.Errorf("pgtest: restart: %w", ctx.Err())
	}
	return s.run(ctx)
}

// waitReady polls until the server accepts a connection, it exits, or ctx
// ends.
func (s *Server) waitReady(ctx context.Context) error {
	for {
		conn, err := s.connect(ctx, "postgres")
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("pgtest: postgres exited (%v):\n%s", s.exitErr, s.Log())
		case <-ctx.Done():
			return fmt.Errorf("pgtest: postgres not ready: %w (last: %v):\n%s", ctx.Err(), err, s.Log())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL is the connection string of database db as the superuser.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@%s:%d/%s?sslmode=disable", s.ip(), s.port, db)
}

// ip is the address the server listens on.
func (s *Server) ip() string {
	if s.host != nil {
		return s.host.IP()
	}
	return "127.0.0.1"
}

// connect connects to database db as the superuser, from the server's
// host InHost.
func (s *Server) connect(ctx context.Context, db string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(s.URL(db))
	if err != nil {
		return nil, err
	}
	if s.host != nil {
		cfg.DialFunc = s.host.DialContext
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// Log is what the server has written to its standard output and error.
func (s *Server) Log() string {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	return s.out.b.String()
}

// NewDatabase creates an empty database and returns its URL. The database
// is dropped on t.Cleanup (closing any connection left open to it), unless
// the server was stopped first.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("test_%d", s.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		if s.stopped.Load() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := s.exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database: %v", err)
		}
	})
	return s.URL(name)
}

// exec runs one statement in the maintenance database.
func (s *Server) exec(ctx context.Context, sql string) error {
	conn, err := s.connect(ctx, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// Stop shuts the server down (fast shutdown, then SIGKILL after 15 s) and
// removes its files. It is safe to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.stopped.Store(true)
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exited:
		case <-time.After(stopTimeout):
			s.kill()
			s.stopErr = fmt.Errorf("postgres did not stop within %v; killed it", stopTimeout)
		}
		if err := os.RemoveAll(s.dir); err != nil && s.stopErr == nil {
			s.stopErr = err
		}
	})
	return s.stopErr
}

// kill ends the server at once and waits for it.
func (s *Server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Shared is one server for all the tests of a test binary, launched when a
// test first asks for a database. Stop it from TestMain after m.Run.
type Shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// NewDatabase creates an empty database on the shared server (launching
// it on first use), dropped on t.Cleanup. It skips or fails t as Start
// does.
func (sh *Shared) NewDatabase(t testing.TB) string {
	t.Helper()
	sh.once.Do(func() { sh.srv, sh.err = Launch(context.Background()) })
	if sh.err != nil {
		skipOrFail(t, sh.err)
	}
	return sh.srv.NewDatabase(t)
}

// Stop stops the shared server if it was launched.
func (sh *Shared) Stop() error {
	sh.once.Do(func() {}) // no launch after Stop
	if sh.srv == nil {
		return nil
	}
	return sh.srv.Stop()
}

// Silent listens on a free loopback port until t ends, accepting
// connections and never answering them, and returns a database URL there:
// a database that hangs (a stopped server, a firewall dropping its
// replies).
func Silent(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest: silent server: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed at cleanup
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return fmt.Sprintf("postgres://postgres@%s/silent?sslmode=disable", ln.Addr())
}

// binDir finds the directory holding initdb and postgres: PATH first, then
// Debian's /usr/lib/postgresql/<version>/bin, the newest version.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(p); executable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, dir := range dirs {
		if executable(filepath.Join(dir, "initdb")) && executable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", ErrNoPostgres
}

// version is the major version in /usr/lib/postgresql/<version>/bin.
func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func executable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir() && info.Mode()&0o111 != 0
}

// runAs is the user to run the server as: nil (the current user) unless
// that is root, which PostgreSQL refuses; then "postgres" (Debian's
// package creates it) or else "nobody".
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("pgtest: running as root, and neither user postgres nor nobody exists to run PostgreSQL as")
}

// tempBase is where the server's directory goes: the usual temporary
// directory, or /tmp when the server runs as another user who could not
// enter that one (a private TMPDIR).
func tempBase(cred *syscall.Credential) string {
	base := os.TempDir()
	if info, err := os.Stat(base); cred != nil && (err != nil || info.Mode().Perm()&0o001 == 0) {
		return "/tmp"
	}
	return base
}

// freePort is a TCP port nobody listened on a moment ago: of loopback, or
// of host's address.
func freePort(host *netnstest.Host) (int, error) {
	var l net.Listener
	var err error
	if host != nil {
		l, err = host.Listen("tcp", host.IP()+":0")
	} else {
		l, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return 0, fmt.Errorf("pgtest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// lockedWriter collects the server's output from two pipes.
type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
