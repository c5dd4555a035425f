// Package nodetest runs a MusePi cluster of processes on loopback for
// tests: a private etcd and PostgreSQL, the fake LLM server, and `musepi
// node` processes started from a built binary on free ports, each with its
// own configuration file, in plaintext or with mutual TLS (certificates of
// a CA of the test's own). With Options.Net the same cluster runs in a
// private network of namespaces instead (internal/testkit/netnstest),
// each server, node and client on a host of its own, whose links the test
// can cut. It kills the processes with SIGKILL or stops them with SIGTERM
// on demand, and kills what is left when the test ends, printing every
// process's output if the test failed.
//
// It is part of the test kit (internal/testkit): only cmd/musepi's tests
// import it.
package nodetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/musepi/musepi/cluster/etcdtest"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/internal/testkit/netnstest"
	"github.com/musepi/musepi/internal/testkit/testcert"
	"github.com/musepi/musepi/provider/fakellm"
)

// The API keys the nodes' provider "fake" uses, and the environment
// variables that hold them.
const (
	KeyA    = "key-a"
	KeyB    = "key-b"
	KeyAEnv = "MUSEPI_NODETEST_KEY_A"
	KeyBEnv = "MUSEPI_NODETEST_KEY_B"
)

// StartTimeout bounds a node's start: connecting to the database, joining
// the cluster, printing where it listens.
const StartTimeout = 30 * time.Second

// Options configure a cluster.
type Options struct {
	// Scenario is the fake LLM server's scenario (nil: every call streams
	// the default text).
	Scenario *fakellm.Scenario
	// Extra is TOML appended to every node's file after the [cluster]
	// table's keys (say "lease_ms = 2000"); it is inside [cluster].
	Extra string
	// TLS runs the cluster with mutual TLS: a cluster CA (Env.CA), etcd
	// serving https and requiring client certificates of that CA, and
	// every member's file (Member) naming a certificate of its own in
	// [cluster.tls] and [cluster.etcd.tls].
	TLS bool
	// OnRequest, if set, sees every request to the fake LLM server, with
	// its body, before the server answers it (from the server's handler
	// goroutines, so it must be safe for concurrent use).
	OnRequest func(r *http.Request, body []byte)
	// KeysPerNode gives each node process API key values of its own,
	// KeyA+"@"+name and KeyB+"@"+name, so that OnRequest can tell which
	// node called.
	KeysPerNode bool
	// MaxRetries is every member's [retry] max_retries (0: the default),
	// for prompts that ride out a long outage.
	MaxRetries int
	// BaseDelay is every member's [retry] base_delay_ms (0: 100 ms).
	BaseDelay time.Duration
	// Models are more models the provider "fake" lists, after m1 and m2
	// (say a scenario's "slow").
	Models []string
	// Front, if set, wraps the fake LLM server's handler (OnRequest's
	// too): a proxy in front of the server that sees every request and
	// its answer.
	Front func(http.Handler) http.Handler
	// Metrics runs every node with --metrics-addr on its address, port 0
	// (Node.MetricsURL).
	Metrics bool
	// Net runs the cluster in a private network of namespaces instead of
	// on loopback: etcd on host "etcd", PostgreSQL on "pg", the fake LLM
	// server on "llm", each node on a host of its name, each client of
	// StartClientAt on the host it names, and the package's own
	// connections (Registered, DialContext) from host "test"; hosts are
	// added to Net as needed. Every member binds its host's address, which
	// takes mutual TLS: Net implies TLS, each certificate naming its
	// host's address.
	Net *netnstest.Net
}

// Env is a running cluster environment.
type Env struct {
	t    testing.TB
	bin  string
	dir  string
	opts Options

	Etcd *etcdtest.Server
	PG   *pgtest.Server
	// CA is the cluster CA with Options.TLS (else nil).
	CA *testcert.CA
	// DB is the URL of the cluster's database.
	DB string
	// LLM is the fake LLM server; LLMBase its base URL.
	LLM     *fakellm.Server
	LLMBase string

	mu      sync.Mutex
	nodes   []*Node
	members map[string]Member // with Net, by name: one certificate per host

	hostMu  sync.Mutex
	test    *netnstest.Host // with Net: where the package's own connections come from
	testTLS *tls.Config     // with Net: the test's certificate, for etcd
	clients atomic.Int64    // started by StartClientAt, for their names
}

// Start starts etcd, PostgreSQL (with a new database) and the fake LLM
// server for t, with bin the musepi binary. It skips t when etcd or
// PostgreSQL are not installed, unless CI is set (then it fails). Every
// process is stopped when t ends.
func Start(t testing.TB, bin string, opts Options) *Env {
	t.Helper()
	e := &Env{t: t, bin: bin, dir: t.TempDir(), opts: opts, members: map[string]Member{}}
	e.startStores()
	e.startLLM()
	t.Cleanup(e.cleanup) // runs before the servers stop
	return e
}

// startStores starts etcd and PostgreSQL, and makes the cluster's
// database: with TLS (or Net), etcd with a certificate of a new cluster CA;
// with Net, both on hosts of their own.
func (e *Env) startStores() {
	e.t.Helper()
	var etcdOpts []etcdtest.Option
	var pgOpts []pgtest.Option
	if e.opts.TLS || e.opts.Net != nil {
		e.CA = testcert.NewCA(e.t, "nodetest cluster CA")
		cert := testcert.Cert{Name: "etcd"}
		if e.opts.Net != nil {
			e.test = e.host("test")
			e.testTLS = e.CA.Config(e.t, testcert.Cert{Name: "test", Hosts: []string{e.test.IP()}})
			cert.Hosts = []string{e.host("etcd").IP()}
			etcdOpts = append(etcdOpts, etcdtest.InHost(e.host("etcd")))
			pgOpts = append(pgOpts, pgtest.InHost(e.host("pg")))
		}
		etcdOpts = append(etcdOpts, etcdtest.WithTLS(e.CA.Issue(e.t, cert)))
	}
	e.Etcd = etcdtest.Start(e.t, etcdOpts...)
	e.PG = pgtest.Start(e.t, pgOpts...)
	e.DB = e.PG.NewDatabase(e.t)
}

// startLLM starts the fake LLM server, behind OnRequest's front and
// Front if set, on loopback or on host "llm".
func (e *Env) startLLM() {
	e.t.Helper()
	e.LLM = fakellm.New(e.opts.Scenario)
	var handler http.Handler = e.LLM
	if on := e.opts.OnRequest; on != nil {
		next := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			on(r, body)
			next.ServeHTTP(w, r)
		})
	}
	if e.opts.Front != nil {
		handler = e.opts.Front(handler)
	}
	switch fronted := e.opts.OnRequest != nil || e.opts.Front != nil; {
	case e.opts.Net != nil:
		ln, err := e.host("llm").Listen("tcp", net.JoinHostPort(e.host("llm").IP(), "0"))
		if err != nil {
			e.t.Fatalf("nodetest: fake LLM: %v", err)
		}
		front := &httptest.Server{Listener: ln, Config: &http.Server{Handler: handler}}
		front.Start()
		e.t.Cleanup(front.Close)
		e.LLMBase = front.URL
	case fronted:
		front := httptest.NewServer(handler)
		e.t.Cleanup(front.Close)
		e.LLMBase = front.URL
	default:
		base, err := e.LLM.Start("127.0.0.1:0")
		if err != nil {
			e.t.Fatalf("nodetest: fake LLM: %v", err)
		}
		e.LLMBase = base
	}
	e.t.Cleanup(func() {
		if err := e.LLM.Close(); err != nil {
			e.t.Errorf("nodetest: fake LLM close: %v", err)
		}
	})
}

// host is host name of Options.Net, added on first use.
func (e *Env) host(name string) *netnstest.Host {
	e.hostMu.Lock()
	defer e.hostMu.Unlock()
	if h := e.opts.Net.Host(name); h != nil {
		return h
	}
	return e.opts.Net.Add(name)
}

// ip is the address of the member or server called name: its host's with
// Options.Net, else loopback's.
func (e *Env) ip(name string) string {
	if e.opts.Net == nil {
		return "127.0.0.1"
	}
	return e.host(name).IP()
}

// start starts cmd for name: inside its host with Options.Net.
func (e *Env) start(cmd *exec.Cmd, name string) error {
	if e.opts.Net == nil {
		return cmd.Start()
	}
	return e.host(name).Start(cmd)
}

// DialContext dials addr from host "test" with Options.Net (from this
// process without): for the test's own connections to the cluster's
// servers, as a pgx DialFunc or an http.Transport's DialContext.
func (e *Env) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if e.opts.Net == nil {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	return e.test.DialContext(ctx, network, addr)
}

// Member is what a member's configuration file says besides its name and
// port.
type Member struct {
	// TLS and EtcdTLS are the files its [cluster.tls] and
	// [cluster.etcd.tls] tables name; nil leaves the table out.
	TLS, EtcdTLS *testcert.Files
	// Host is [cluster] host ("": the default, 127.0.0.1); an unspecified
	// address ("0.0.0.0") comes with advertise_address 127.0.0.1:PORT.
	Host string
	// HandoverTimeout is [cluster] handover_timeout_ms and Lease
	// [cluster] lease_ms (0: the defaults). A client gives up opening a
	// session after twice the sum of both and a second, and 5 s more.
	// Options.Extra must not set them too.
	HandoverTimeout, Lease time.Duration
}

// Member is node name's member: with Options.TLS, a certificate of its
// own from the cluster CA (for 127.0.0.1, both key usages) in both TLS
// tables; without, plaintext. With Options.Net its host is the address of
// its host, which its certificate names, issued once per name.
func (e *Env) Member(name string) Member {
	if e.opts.Net != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		m, ok := e.members[name]
		if !ok {
			ip := e.ip(name)
			f := e.CA.Issue(e.t, testcert.Cert{Name: name, Hosts: []string{ip}})
			m = Member{TLS: &f, EtcdTLS: &f, Host: ip}
			e.members[name] = m
		}
		return m
	}
	if e.CA == nil {
		return Member{}
	}
	f := e.CA.Issue(e.t, testcert.Cert{Name: name})
	return Member{TLS: &f, EtcdTLS: &f}
}

// Config is the configuration file of node name on cluster port port, as
// m says: provider "fake" (the fake LLM server, models m1, m2 and the
// Options' Models, credentials "key A" and "key B"), default model
// fake/m1, fast retries (base_delay_ms 100; it and max_retries as the
// Options say), and a [cluster] table with etcd membership and the
// cluster's database.
func (e *Env) Config(name string, port int, m Member) string {
	var tables strings.Builder
	for _, t := range []struct {
		header string
		files  *testcert.Files
	}{{"[cluster.etcd.tls]", m.EtcdTLS}, {"[cluster.tls]", m.TLS}} {
		if t.files != nil {
			fmt.Fprintf(&tables, "  %s\n  ca_file = %q\n  cert_file = %q\n  key_file = %q\n", t.header, t.files.CA, t.files.Cert, t.files.Key)
		}
	}
	return fmt.Sprintf(`default_model = "fake/m1"

[providers.fake]
kind = "openai"
base_url = %q
models = %s
  [[providers.fake.credentials]]
  name = "key A"
  api_key_env = %q
  [[providers.fake.credentials]]
  name = "key B"
  api_key_env = %q

[retry]
%s
[cluster]
name = "nodetest"
port = %d
node_name = %q
membership = "etcd"
database_url = %q
%s%s
  [cluster.etcd]
  endpoints = [%q]
%s`, e.LLMBase+"/v1", e.models(), KeyAEnv, KeyBEnv, e.retryKeys(), port, name, e.DB, m.keys(port), e.opts.Extra, e.Etcd.Endpoint(), tables.String())
}

// keys are the [cluster] keys m sets, for a member on port.
func (m Member) keys(port int) string {
	var keys strings.Builder
	if m.Host != "" {
		fmt.Fprintf(&keys, "host = %q\n", m.Host)
		if ip := net.ParseIP(m.Host); ip != nil && ip.IsUnspecified() {
			fmt.Fprintf(&keys, "advertise_address = \"127.0.0.1:%d\"\n", port)
		}
	}
	if m.HandoverTimeout > 0 {
		fmt.Fprintf(&keys, "handover_timeout_ms = %d\n", m.HandoverTimeout.Milliseconds())
	}
	if m.Lease > 0 {
		fmt.Fprintf(&keys, "lease_ms = %d\n", m.Lease.Milliseconds())
	}
	return keys.String()
}

// models is the provider's models, a TOML array.
func (e *Env) models() string {
	var quoted []string
	for _, m := range append([]string{"m1", "m2"}, e.opts.Models...) {
		quoted = append(quoted, strconv.Quote(m))
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// retryKeys are the keys of every member's [retry] table.
func (e *Env) retryKeys() string {
	baseDelay := 100 * time.Millisecond
	if e.opts.BaseDelay > 0 {
		baseDelay = e.opts.BaseDelay
	}
	keys := fmt.Sprintf("base_delay_ms = %d\nmax_delay_ms = 60000\n", baseDelay.Milliseconds())
	if e.opts.MaxRetries > 0 {
		keys += fmt.Sprintf("max_retries = %d\n", e.opts.MaxRetries)
	}
	return keys
}

// Environ is the environment a node or client process runs with: this
// process's, plus the API keys.
func Environ() []string {
	return append(os.Environ(), KeyAEnv+"="+KeyA, KeyBEnv+"="+KeyB)
}

// WriteConfig writes the file of node name on port, as m says, into the
// environment's directory and returns its path.
func (e *Env) WriteConfig(name string, port int, m Member) string {
	e.t.Helper()
	path := filepath.Join(e.dir, name+".toml")
	if err := os.WriteFile(path, []byte(e.Config(name, port, m)), 0o600); err != nil {
		e.t.Fatalf("nodetest: %v", err)
	}
	return path
}

// StartNode starts `musepi node --config FILE` for a new node called name
// (its Member, a free port) and waits until it prints where it listens.
func (e *Env) StartNode(name string, args ...string) *Node {
	e.t.Helper()
	return e.StartNodeAs(name, e.Member(name), args...)
}

// StartNodeAs is StartNode with m's file.
func (e *Env) StartNodeAs(name string, m Member, args ...string) *Node {
	e.t.Helper()
	return e.listening(e.Launch(name, m, args...))
}

// listening waits until node n prints where it listens, and returns it.
func (e *Env) listening(n *Node) *Node {
	e.t.Helper()
	line, err := n.WaitLine("listening on ", StartTimeout)
	if err != nil {
		e.t.Fatalf("nodetest: node %s did not start: %v\n%s", n.Name, err, n.out)
	}
	// "musepi node: NODE listening on ADDR (cluster ...)"
	n.Addr = strings.Fields(strings.SplitN(line, "listening on ", 2)[1])[0]
	if e.opts.Metrics { // "musepi node: metrics on URL", before it joined
		if _, url, ok := strings.Cut(n.out.Last("musepi node: metrics on "), "metrics on "); ok {
			n.MetricsURL = strings.Fields(url)[0]
		}
	}
	return n
}

// Launch starts `musepi node --config FILE` for a new node called name
// with m's file on a free port, and returns without waiting for it.
func (e *Env) Launch(name string, m Member, args ...string) *Node {
	e.t.Helper()
	port := e.freePort(name)
	return e.launch(&Node{Name: name, Port: port, Config: e.WriteConfig(name, port, m)}, args...)
}

// LaunchConfig is Launch with a file holding config (Config's text, or a
// variation on it).
func (e *Env) LaunchConfig(name, config string, args ...string) *Node {
	e.t.Helper()
	path := filepath.Join(e.dir, name+".toml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		e.t.Fatalf("nodetest: %v", err)
	}
	return e.launch(&Node{Name: name, Config: path}, args...)
}

// Restart starts node n again, once its process has exited (Kill, Term):
// a new process with its name, port and file. It waits until the node
// listens, as StartNode does.
func (e *Env) Restart(n *Node, args ...string) *Node {
	e.t.Helper()
	return e.listening(e.launch(&Node{Name: n.Name, Port: n.Port, Config: n.Config}, args...))
}

// launch starts node n's process with its file and args (and
// --metrics-addr with Options.Metrics), on its host with Options.Net.
func (e *Env) launch(n *Node, args ...string) *Node {
	e.t.Helper()
	if e.opts.Metrics {
		args = append(args, "--metrics-addr", net.JoinHostPort(e.ip(n.Name), "0"))
	}
	n.out, n.exited = &Lines{}, make(chan struct{})
	n.cmd = exec.Command(e.bin, append([]string{"node", "--config", n.Config}, args...)...)
	n.cmd.Env = Environ()
	if e.opts.KeysPerNode {
		n.cmd.Env = append(n.cmd.Env, KeyAEnv+"="+KeyA+"@"+n.Name, KeyBEnv+"="+KeyB+"@"+n.Name)
	}
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test binary
	if err := e.start(n.cmd, n.Name); err != nil {
		e.t.Fatalf("nodetest: start %s: %v", n.Name, err)
	}
	go func() {
		n.err = n.cmd.Wait()
		close(n.exited)
	}()
	e.mu.Lock()
	e.nodes = append(e.nodes, n)
	e.mu.Unlock()
	return n
}

// Run runs the musepi binary with args in the nodes' environment
// (Environ), with an empty stdin, until it exits, and returns its exit
// code and its output (stdout and stderr). Past timeout it kills the
// process and fails the test.
func (e *Env) Run(timeout time.Duration, args ...string) (int, string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Env = Environ()
	var out Lines
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		e.t.Fatalf("nodetest: musepi %v still running after %s; killed it. Output:\n%s", args, timeout, &out)
	case err == nil:
		return 0, out.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String()
	default:
		e.t.Fatalf("nodetest: musepi %v: %v", args, err)
	}
	return -1, ""
}

// Nodes are the nodes started so far, running or not.
func (e *Env) Nodes() []*Node {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*Node(nil), e.nodes...)
}

// WaitMembers waits until every running node's last member list has want
// members.
func (e *Env) WaitMembers(want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var behind []string
		for _, n := range e.Nodes() {
			if n.Running() && n.Members() != want {
				behind = append(behind, fmt.Sprintf("%s sees %d", n.Name, n.Members()))
			}
		}
		if len(behind) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not %d members within %s: %s", want, timeout, strings.Join(behind, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Registered are the cluster addresses of the members registered in etcd,
// the members clients place sessions by, sorted. With Options.Net it reads
// them from host "test".
func (e *Env) Registered() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg := clientv3.Config{Endpoints: []string{e.Etcd.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if e.opts.Net != nil {
		cfg.TLS = e.testTLS
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return e.test.DialContext(ctx, "tcp", addr)
		})}
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	resp, err := c.Get(ctx, "/musepi/nodetest/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range resp.Kvs {
		var m struct {
			Host string `json:"host"`
			Port int    `json:"port"`
		}
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return nil, fmt.Errorf("etcd key %s: %w", kv.Key, err)
		}
		out = append(out, net.JoinHostPort(m.Host, strconv.Itoa(m.Port)))
	}
	slices.Sort(out)
	return out, nil
}

// Agreement is how the running nodes' last member lists compare with each
// other and with etcd's registrations: "" when all are the same.
func (e *Env) Agreement() string {
	reg, err := e.Registered()
	if err != nil {
		return "etcd: " + err.Error()
	}
	want := strings.Join(reg, ", ")
	var differ []string
	for _, n := range e.Nodes() {
		if got := strings.Join(n.MemberList(), ", "); n.Running() && got != want {
			differ = append(differ, fmt.Sprintf("%s sees [%s]", n.Name, got))
		}
	}
	if len(differ) == 0 {
		return ""
	}
	return fmt.Sprintf("etcd has [%s]; %s", want, strings.Join(differ, "; "))
}

// WaitAgreement waits until the running nodes' member lists and etcd's
// registrations agree (Agreement), and returns how long that took.
func (e *Env) WaitAgreement(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		diff := e.Agreement()
		if diff == "" {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("member lists disagree after %s: %s", timeout, diff)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cleanup kills the nodes still running and, if the test failed, prints
// every node's output.
func (e *Env) cleanup() {
	for _, n := range e.Nodes() {
		if n.Running() {
			n.Kill()
		}
		if e.t.Failed() {
			e.t.Logf("--- output of node %s (%s):\n%s", n.Name, n.Addr, n.out)
		}
	}
}

// Node is one `musepi node` process.
type Node struct {
	Name   string
	Config string // its configuration file
	Port   int    // its cluster port
	Addr   string // its cluster address, host:port, once it listens
	// MetricsURL is where it serves /metrics, with Options.Metrics, once
	// it listens.
	MetricsURL string

	cmd    *exec.Cmd
	out    *Lines
	exited chan struct{}
	err    error // the exit status, once exited is closed
}

// Running reports whether the process has not exited.
func (n *Node) Running() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Output is what the node has written to its stdout and stderr.
func (n *Node) Output() *Lines { return n.out }

// WaitLine waits for an output line containing substr and returns it.
func (n *Node) WaitLine(substr string, timeout time.Duration) (string, error) {
	return n.out.Wait(substr, timeout, n.exited)
}

// Members is the size of the last member list the node printed (0: none
// yet).
func (n *Node) Members() int {
	last := n.out.Last("musepi node: members (")
	if last == "" {
		return 0
	}
	count, _, _ := strings.Cut(strings.TrimPrefix(last[strings.Index(last, "members ("):], "members ("), ")")
	c, _ := strconv.Atoi(count)
	return c
}

// MemberList is the last member list the node printed, sorted (nil: none
// yet).
func (n *Node) MemberList() []string {
	last := n.out.Last("musepi node: members (")
	if last == "" {
		return nil
	}
	_, list, _ := strings.Cut(last, "): ")
	return strings.Split(list, ", ") // printed sorted
}

// Pause stops the process (SIGSTOP), as a long GC pause, a VM migration
// or a closed laptop lid would; Resume continues it (SIGCONT). It returns
// once every thread of the process has stopped: the kernel stops them as
// each is next scheduled, which on a loaded machine can come after a
// request sent to the process has been answered.
func (n *Node) Pause() error {
	if err := n.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		stopped, err := allStopped(n.cmd.Process.Pid)
		switch {
		case err != nil || stopped:
			return err
		case time.Now().After(deadline):
			return fmt.Errorf("nodetest: %s not stopped 5 s after SIGSTOP", n.Name)
		}
		time.Sleep(time.Millisecond)
	}
}

// allStopped reports whether every thread of process pid is stopped, by
// its state in /proc (T: stopped by a signal).
func allStopped(pid int) (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, fmt.Errorf("nodetest: threads of process %d: %v", pid, err)
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(task)
		if err != nil {
			continue // a thread that has exited
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false, nil
		}
	}
	return true, nil
}

// Resume continues a paused process.
func (n *Node) Resume() error { return n.cmd.Process.Signal(syscall.SIGCONT) }

// Kill ends the process with SIGKILL and waits for it.
func (n *Node) Kill() {
	_ = n.cmd.Process.Kill()
	<-n.exited
}

// Wait waits at most bound for the process to exit by itself and returns
// its exit code and how long it waited; past bound it kills the process
// and fails.
func (n *Node) Wait(bound time.Duration) (code int, took time.Duration, err error) {
	start := time.Now()
	select {
	case <-n.exited:
		return n.cmd.ProcessState.ExitCode(), time.Since(start), nil
	case <-time.After(bound):
		n.Kill()
		return -1, time.Since(start), fmt.Errorf("node %s still running after %s; killed it", n.Name, bound)
	}
}

// Term sends SIGTERM and waits at most bound for the process to exit. It
// returns how long that took, and an error if the process exited with a
// failure or did not exit in time (it is killed then).
func (n *Node) Term(bound time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	select {
	case <-n.exited:
		return time.Since(start), n.err
	case <-time.After(bound):
		n.Kill()
		return time.Since(start), fmt.Errorf("node %s still running %s after SIGTERM; killed it", n.Name, bound)
	}
}

// Lines collects a process's output and lets tests wait for lines. It is
// an io.Writer for exec.Cmd's Stdout and Stderr.
type Lines struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	changed chan struct{} // closed and replaced at each new line
}

// Write splits p into lines.
func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	added := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		added = true
	}
	if added && l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	return len(p), nil
}

// find returns the first line from index from that match accepts, with
// its index; when there is none, it returns the index to search from next
// time and a channel closed at the next new line.
func (l *Lines) find(match func(string) bool, from int) (line string, index int, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := from; i < len(l.lines); i++ {
		if match(l.lines[i]) {
			return l.lines[i], i, nil
		}
	}
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return "", len(l.lines), l.changed
}

// ErrExited is returned by Wait when the process exited first.
var ErrExited = errors.New("the process exited")

// Wait waits for a line containing substr, at most timeout, or until
// exited is closed.
func (l *Lines) Wait(substr string, timeout time.Duration, exited <-chan struct{}) (string, error) {
	line, _, err := l.WaitFrom(0, func(s string) bool { return strings.Contains(s, substr) }, timeout, exited)
	if err != nil {
		return "", fmt.Errorf("no line with %q: %w", substr, err)
	}
	return line, nil
}

// WaitFrom waits for a line at index from or later that match accepts, at
// most timeout, or until exited is closed; it returns the line and its
// index.
func (l *Lines) WaitFrom(from int, match func(string) bool, timeout time.Duration, exited <-chan struct{}) (string, int, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		line, i, changed := l.find(match, from)
		if changed == nil {
			return line, i, nil
		}
		from = i
		select {
		case <-changed:
		case <-exited:
			if line, i, changed := l.find(match, from); changed == nil {
				return line, i, nil
			}
			return "", 0, ErrExited
		case <-timer.C:
			return "", 0, fmt.Errorf("none within %s", timeout)
		}
	}
}

// Last is the last line containing substr ("" if none).
func (l *Lines) Last(substr string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.lines) - 1; i >= 0; i-- {
		if strings.Contains(l.lines[i], substr) {
			return l.lines[i]
		}
	}
	return ""
}

// String is every line so far.
func (l *Lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n") + string(l.partial)
}

// Len is the number of whole lines so far: a mark for Since.
func (l *Lines) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// Since are the whole lines after mark (a Len).
func (l *Lines) Since(mark int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines[min(mark, len(l.lines)):])
}

// Logged are the log lines at level (" WRN ", " ERR ", as the command's
// console format writes them) among lines.
func Logged(lines []string, level string) []string {
	var out []string
	for _, line := range lines {
		if strings.Contains(line, level) {
			out = append(out, line)
		}
	}
	return out
}

// freePort is a TCP port nobody listened on a moment ago where member
// name listens: on its host with Options.Net, else on loopback.
func (e *Env) freePort(name string) int {
	e.t.Helper()
	if e.opts.Net == nil {
		return FreePort(e.t)
	}
	ln, err := e.host(name).Listen("tcp", net.JoinHostPort(e.ip(name), "0"))
	if err != nil {
		e.t.Fatalf("nodetest: free port on %s: %v", name, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FreePort is a loopback TCP port nobody listened on a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("nodetest: free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Client is a `musepi rpc --cluster` process: JSON lines on its stdin and
// stdout.
type Client struct {
	t      testing.TB
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *Lines // stdout: responses and events
	errOut *Lines
	exited chan struct{}
	err    error
	next   int // index of the first stdout line NextEvent has not looked at
	closed atomic.Bool
}

// Running reports whether the client's process has not exited.
func (c *Client) Running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// Stderr is what the client wrote to its stderr so far.
func (c *Client) Stderr() string { return c.errOut.String() }

// StartClient starts `musepi rpc --cluster --config FILE` with node's
// file (it joins as a client member, hosting nothing) and args (such as
// --session-id ID); with Options.Net, on node's host. The client is
// stopped when the test ends.
func (e *Env) StartClient(node *Node, args ...string) *Client {
	e.t.Helper()
	return e.startClient(node.Name, node.Config, args)
}

// StartClientAt starts `musepi rpc --cluster` as a member of its own on
// host (with Options.Net, inside host's namespace; the name is only a
// name without): a file of its own, member HOST-N (the Nth client
// started so), port 0, with the Member of host, and args. The client is
// stopped when the test ends.
func (e *Env) StartClientAt(host string, args ...string) *Client {
	e.t.Helper()
	name := fmt.Sprintf("%s-%d", host, e.clients.Add(1))
	return e.startClient(host, e.WriteConfig(name, 0, e.Member(host)), args)
}

// startClient starts a client with file config on host.
func (e *Env) startClient(host, config string, args []string) *Client {
	e.t.Helper()
	c := &Client{t: e.t, out: &Lines{}, errOut: &Lines{}, exited: make(chan struct{})}
	c.cmd = exec.Command(e.bin, append([]string{"rpc", "--cluster", "--config", config}, args...)...)
	c.cmd.Env = Environ()
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.errOut
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := c.cmd.StdinPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	c.in = in
	if err := e.start(c.cmd, host); err != nil {
		e.t.Fatalf("nodetest: start rpc client: %v", err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	e.t.Cleanup(func() {
		if c.closed.Load() { // the test closed it, and judged how
			return
		}
		if err := c.Close(15 * time.Second); err != nil {
			e.t.Errorf("nodetest: %v", err)
		}
		if e.t.Failed() {
			e.t.Logf("--- stderr of rpc client %v:\n%s", args, c.errOut)
		}
	})
	return c
}

// Send writes one command line.
func (c *Client) Send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatalf("nodetest: send %s: %v\nstderr:\n%s", line, err, c.errOut)
	}
}

// NextEvent returns the next stdout object (after those NextEvent or
// Response returned) whose "type" is typ, waiting at most timeout.
func (c *Client) NextEvent(typ string, timeout time.Duration) (map[string]any, error) {
	var obj map[string]any
	_, i, err := c.out.WaitFrom(c.next, func(line string) bool {
		obj = nil
		return json.Unmarshal([]byte(line), &obj) == nil && obj["type"] == typ
	}, timeout, c.exited)
	if err != nil {
		return nil, fmt.Errorf("no %s event: %w (stderr:\n%s)", typ, err, c.errOut)
	}
	c.next = i + 1
	return obj, nil
}

// Call sends a command with id and returns its response's data, failing
// the test unless it succeeded within timeout. Events before the response
// stay for NextEvent.
func (c *Client) Call(id, line string, timeout time.Duration) any {
	c.t.Helper()
	c.Send(line)
	var obj map[string]any
	_, _, err := c.out.WaitFrom(c.next, func(l string) bool {
		obj = nil
		return json.Unmarshal([]byte(l), &obj) == nil && obj["type"] == "response" && obj["id"] == id
	}, timeout, c.exited)
	if err != nil {
		c.t.Fatalf("nodetest: %s: no response: %v\nstderr:\n%s", line, err, c.errOut)
	}
	if obj["success"] != true {
		c.t.Fatalf("nodetest: %s: %v", line, obj)
	}
	return obj["data"]
}

// Output is what the client has written to stdout.
func (c *Client) Output() *Lines { return c.out }

// Close closes the client's stdin, which ends it, and waits at most
// bound (then kills it). It is safe to call more than once.
func (c *Client) Close(bound time.Duration) error {
	c.closed.Store(true)
	_ = c.in.Close()
	select {
	case <-c.exited:
	case <-time.After(bound):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("rpc client still running %s after its stdin closed; killed it", bound)
	}
	if c.err != nil {
		return fmt.Errorf("rpc client: %v\nstderr:\n%s", c.err, c.errOut)
	}
	return nil
}

// Events are every stdout object so far whose "type" is typ, in order.
func (c *Client) Events(typ string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(c.out.String(), "\n") {
		var obj map[string]any
		if json.Unmarshal([]byte(line), &obj) == nil && obj["type"] == typ {
			out = append(out, obj)
		}
	}
	return out
}
