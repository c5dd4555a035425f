// Package etcdtest starts a private etcd server for tests: one member in a
// temporary directory, listening on free loopback ports (or inside a
// network namespace of internal/testkit/netnstest, on its host's address),
// stopped and removed when the test ends.
package etcdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/musepi/musepi/internal/testkit/netnstest"
	"github.com/musepi/musepi/internal/testkit/testcert"
	"github.com/musepi/musepi/internal/testkit/testtool"
)

// ErrNoEtcd is returned by Launch when the etcd binary is not on PATH.
var ErrNoEtcd = errors.New("etcd not found on PATH: apt-get install etcd-server")

// Bounds on starting and stopping a server.
const (
	startTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

// Server is a private single-member etcd.
type Server struct {
	dir      string
	endpoint string
	bin      string
	args     []string
	health   *http.Client    // for /health, with the client certificate WithTLS
	host     *netnstest.Host // where it runs (nil: this process's loopback)
	cmd      *exec.Cmd
	exit     chan error
	out      *lockedBuffer
	stopOnce sync.Once
	stopErr  error
}

// Option configures Launch.
type Option func(*options)

type options struct {
	tls  *testcert.Files
	host *netnstest.Host
}

// WithTLS makes the server serve its clients over https with files' Cert
// and Key, and require client certificates signed by files' CA (etcd's
// --client-cert-auth). Its health checks present files' certificate, which
// therefore needs the clientAuth key usage as well as serverAuth (as
// testcert's certificates have).
func WithTLS(files testcert.Files) Option {
	return func(o *options) { o.tls = &files }
}

// InHost runs the server inside host's network namespace, listening on
// the host's address, and makes its health checks from there.
func InHost(host *netnstest.Host) Option {
	return func(o *options) { o.host = host }
}

// Start launches a server for the test and stops it on t.Cleanup. When etcd
// is missing it skips the test with one line, or fails it under CI
// (testtool.Missing); it fails it on any other error.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := Launch(context.Background(), opts...)
	if err != nil {
		if errors.Is(err, ErrNoEtcd) {
			testtool.Missing(t, testtool.Etcd, "etcd not found on PATH")
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("etcdtest: %v", err)
		}
	})
	return s
}

// Launch starts etcd with its data in a new temporary directory, its
// client and peer URLs on free ports of 127.0.0.1 (of the host's address
// InHost), and waits (at most 30 s) until it reports itself healthy. Call
// Stop to end it and remove its files.
func Launch(ctx context.Context, opts ...Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, ErrNoEtcd
	}
	scheme, health, tlsFlags, err := o.healthCheck()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	// A free port may be taken by someone else before etcd binds it: try
	// a few.
	var lastErr error
	for range 3 {
		s, err := launch(ctx, o.host, bin, scheme, health, tlsFlags)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// healthCheck is the scheme of the server's URLs, the client of its
// health checks and etcd's TLS flags, as o says.
func (o *options) healthCheck() (scheme string, health *http.Client, tlsFlags []string, err error) {
	scheme, health = "http", &http.Client{Timeout: time.Second}
	var transport *http.Transport
	if o.tls != nil {
		cfg, err := o.tls.Load()
		if err != nil {
			return "", nil, nil, fmt.Errorf("etcdtest: %w", err)
		}
		scheme, transport = "https", &http.Transport{TLSClientConfig: cfg}
		tlsFlags = []string{"--cert-file", o.tls.Cert, "--key-file", o.tls.Key,
			"--trusted-ca-file", o.tls.CA, "--client-cert-auth"}
	}
	if o.host != nil {
		if transport == nil {
			transport = &http.Transport{}
		}
		transport.DialContext = o.host.DialContext
	}
	if transport != nil {
		health.Transport = transport
	}
	return scheme, health, tlsFlags, nil
}

// errPortTaken: etcd could not bind a port found free.
var errPortTaken = errors.New("etcdtest: a port was taken before etcd bound it")

// launch starts etcd on two free ports, in a new directory, inside host
// (nil: on loopback).
func launch(ctx context.Context, host *netnstest.Host, bin, scheme string, health *http.Client, tlsFlags []string) (*Server, error) {
	client, err := freePort(host)
	if err != nil {
		return nil, err
	}
	peer, err := freePort(host)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "etcdtest-")
	if err != nil {
		return nil, fmt.Errorf("etcdtest: %w", err)
	}
	ip := "127.0.0.1"
	if host != nil {
		ip = host.IP()
	}
	clientURL := scheme + "://" + ip + ":" + strconv.Itoa(client)
	peerURL := "http://" + ip + ":" + strconv.Itoa(peer)
	s := &Server{dir: dir, endpoint: clientURL, bin: bin, health: health, host: host, out: &lockedBuffer{}}
	s.args = append([]string{
		"--name", "etcdtest", "--data-dir", dir + "/data",
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "etcdtest=" + peerURL, "--initial-cluster-state", "new",
		"--unsafe-no-fsync", "--log-level", "warn"}, tlsFlags...)
	if err := s.run(ctx); err != nil {
		_ = s.Stop()
		if strings.Contains(s.out.String(), "address already in use") {
			return nil, fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return nil, err
	}
	return s, nil
}

// run starts the etcd process and waits until it is healthy.
func (s *Server) run(ctx context.Context) error {
	s.exit = make(chan error, 1)
	s.cmd = exec.Command(s.bin, s.args...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test binary
	start := s.cmd.Start
	if s.host != nil {
		start = func() error { return s.host.Start(s.cmd) }
	}
	if err := start(); err != nil {
		return fmt.Errorf("etcdtest: start %s: %w", s.bin, err)
	}
	go func() { s.exit <- s.cmd.Wait() }()
	if err := s.waitHealthy(ctx, s.health); err != nil {
		return fmt.Errorf("etcdtest: %w; output:\n%s", err, s.out.String())
	}
	return nil
}

// Halt stops the server (SIGTERM, then SIGKILL after 10 s) and keeps its
// data, as an operator stopping etcd would; Restart starts it again.
func (s *Server) Halt() { s.halt() }

// Restart starts a halted server again, on the same ports with the same
// data, and waits (at most 30 s) until it is healthy.
func (s *Server) Restart() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	return s.run(ctx)
}

// halt ends the process, if it runs.
func (s *Server) halt() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case err := <-s.exit: // already exited
		s.exit <- err
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exit:
		s.exit <- err
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		s.exit <- <-s.exit
	}
}

// Endpoint is the server's client URL (https:// WithTLS).
func (s *Server) Endpoint() string { return s.endpoint }

// waitHealthy polls the server's /health with client until it answers
// 200.
func (s *Server) waitHealthy(ctx context.Context, client *http.Client) error {
	defer client.CloseIdleConnections()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.endpoint+"/health", nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-s.exit:
			s.exit <- err
			return fmt.Errorf("etcd exited: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("etcd not healthy within %s: %w", startTimeout, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after 10 s) and removes its
// directory. It is safe to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.halt()
		s.stopErr = os.RemoveAll(s.dir)
	})
	return s.stopErr
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
		return 0, fmt.Errorf("etcdtest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// lockedBuffer collects the server's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
