// Package netnstest builds a private IPv4 network for one test out of
// Linux network namespaces: a namespace of the test's own holding a
// bridge, and one namespace per host, joined to the bridge by a veth pair
// and given an address of a random 10.x.y.0/24. Processes and sockets are
// placed in a host's namespace, and iptables rules inside it cut the
// host's links (packets dropped, as a real partition loses them) and heal
// them. Nothing is created outside the test's namespaces, and everything
// is removed when the test ends.
//
// It needs root, ip (iproute2) and iptables-restore. Without them, or when
// `ip netns add` fails, New skips the test with one line, or fails it under
// CI (internal/testkit/testtool).
//
// It is part of the test kit (internal/testkit): cmd/musepi's partition
// test, nodetest and the test servers of cluster/etcdtest and
// cluster/pgstore/pgtest use it.
package netnstest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/musepi/musepi/internal/testkit/testtool"
)

// commandTimeout bounds each ip and iptables-restore command.
const commandTimeout = 10 * time.Second

// Net is one test's private network.
type Net struct {
	t      testing.TB
	id     string // in every namespace's name, unique to the test
	bridge string // the bridge's namespace
	subnet [3]byte

	mu    sync.Mutex
	hosts map[string]*Host
	order []*Host // in the order added, for the cleanup
}

// Host is one namespace on the network, with one address.
type Host struct {
	name string
	ns   string // the namespace's name (ip netns)
	ip   string
}

// New builds the bridge of a new network for t and removes the network
// (every host's namespace with it) when t ends: add hosts with Add. It
// skips t, or fails it under CI, when the test is not root, when ip or
// iptables-restore are not on PATH, or when a namespace cannot be made or
// given rules.
func New(t testing.TB) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		testtool.Missing(t, testtool.Netns, "not running as root")
	}
	for _, bin := range []string{"ip", "iptables-restore"} {
		if _, err := exec.LookPath(bin); err != nil {
			testtool.Missing(t, testtool.Netns, bin+" not found on PATH")
		}
	}
	n := &Net{t: t, hosts: map[string]*Host{}, subnet: [3]byte{10, byte(rand.IntN(256)), byte(rand.IntN(256))}}
	if err := n.addBridge(); err != nil {
		testtool.Missing(t, testtool.Netns, err.Error())
	}
	t.Cleanup(n.remove)
	err := errors.Join(
		ip("-n", n.bridge, "link", "set", "lo", "up"),
		ip("-n", n.bridge, "link", "add", "br0", "type", "bridge", "forward_delay", "0"),
		ip("-n", n.bridge, "link", "set", "br0", "up"))
	if err != nil {
		t.Fatal(err)
	}
	if err := restore(&Host{name: "bridge", ns: n.bridge}, nil); err != nil {
		testtool.Missing(t, testtool.Netns, err.Error())
	}
	return n
}

// addBridge makes the bridge's namespace under a new random id: another
// test's id, taken already, is passed over.
func (n *Net) addBridge() error {
	err := errors.New("netnstest: no free namespace name")
	for range 3 {
		n.id = fmt.Sprintf("%06x", rand.IntN(1<<24))
		n.bridge = "nt" + n.id + "-bridge"
		if _, statErr := os.Stat("/run/netns/" + n.bridge); statErr == nil {
			continue
		}
		if err = ip("netns", "add", n.bridge); err == nil {
			return nil
		}
	}
	return err
}

// Subnet is the network's address range, 10.x.y.0/24.
func (n *Net) Subnet() string {
	return fmt.Sprintf("%d.%d.%d.0/24", n.subnet[0], n.subnet[1], n.subnet[2])
}

// Add makes host name: a namespace with loopback up and an interface on
// the bridge with the next free address of the subnet. It fails the test
// when name is taken or the host cannot be made.
func (n *Net) Add(name string) *Host {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hosts[name] != nil {
		n.t.Fatalf("netnstest: host %s added twice", name)
	}
	num := len(n.order) + 1
	if num > 254 {
		n.t.Fatalf("netnstest: no address left for host %s", name)
	}
	h := &Host{name: name, ns: fmt.Sprintf("nt%s-%d", n.id, num),
		ip: fmt.Sprintf("%d.%d.%d.%d", n.subnet[0], n.subnet[1], n.subnet[2], num)}
	if err := ip("netns", "add", h.ns); err != nil {
		n.t.Fatal(err)
	}
	n.hosts[name], n.order = h, append(n.order, h)
	veth := fmt.Sprintf("v%d", num) // in the bridge's namespace: short, and unique there
	err := errors.Join(
		ip("-n", h.ns, "link", "set", "lo", "up"),
		ip("-n", n.bridge, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns),
		ip("-n", n.bridge, "link", "set", veth, "master", "br0", "up"),
		ip("-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0"),
		ip("-n", h.ns, "link", "set", "eth0", "up"))
	if err == nil {
		err = linkUp(h.ns, "eth0")
	}
	if err != nil {
		n.t.Fatalf("netnstest: host %s: %v", name, err)
	}
	return h
}

// linkUp waits, at most commandTimeout, until interface dev of namespace
// ns is up with a carrier: a veth set up comes up a moment later, and a
// first packet sent before it is lost (a TCP SYN then waits a second to be
// sent again).
func linkUp(ns, dev string) error {
	deadline := time.Now().Add(commandTimeout)
	for {
		out, err := exec.Command("ip", "-n", ns, "-o", "link", "show", dev).CombinedOutput()
		if err == nil && strings.Contains(string(out), "state UP") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netnstest: %s in %s not up after %s: %s", dev, ns, commandTimeout, strings.TrimSpace(string(out)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Host is host name, or nil if it was not added.
func (n *Net) Host(name string) *Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hosts[name]
}

// remove deletes every namespace: their interfaces and rules go with them.
// A namespace lives on while a process is still in it.
func (n *Net) remove() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, h := range n.order {
		if err := ip("netns", "delete", h.ns); err != nil {
			n.t.Errorf("netnstest: %v", err)
		}
	}
	if err := ip("netns", "delete", n.bridge); err != nil {
		n.t.Errorf("netnstest: %v", err)
	}
}

// Name is the host's name on the network.
func (h *Host) Name() string { return h.name }

// IP is the host's address.
func (h *Host) IP() string { return h.ip }

// Namespace is the name of the host's namespace, for `ip netns exec`.
func (h *Host) Namespace() string { return h.ns }

// Command is the command name with args run inside the host's namespace
// by `ip netns exec`, which ends with ctx.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.ns, name}, args...)...)
}

// Start starts cmd inside the host's namespace: the process is forked
// from a thread that has entered it. Unlike Command, the process is the
// program itself, with cmd's SysProcAttr (credentials, a parent-death
// signal) as given.
func (h *Host) Start(cmd *exec.Cmd) error { return h.inside(cmd.Start) }

// Listen is net.Listen inside the host's namespace: the listener and the
// connections it accepts stay there.
func (h *Host) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := h.inside(func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// DialContext is net.Dialer's DialContext inside the host's namespace, the
// signature of pgx's DialFunc and http.Transport's DialContext.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := h.inside(func() (err error) {
		var d net.Dialer
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// inside runs f on a thread locked to a goroutine of its own, inside the
// host's namespace, and moves the thread back before it serves another
// goroutine. The thread must live on: a process started with a
// parent-death signal gets it when the thread that forked it ends, and
// the runtime may have run such a fork on any of its threads. Only when
// the thread cannot move back does it stay locked, and so end with the
// goroutine, rather than serve another in the wrong namespace.
func (h *Host) inside(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("netnstest: this thread's namespace: %w", err)
			return
		}
		defer unix.Close(back)
		if err := h.enter(); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		ferr := f()
		if err := unix.Setns(back, unix.CLONE_NEWNET); err != nil {
			done <- errors.Join(ferr, fmt.Errorf("netnstest: leave the namespace of %s: %w", h.name, err))
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// enter moves the calling thread into the host's namespace.
func (h *Host) enter() error {
	fd, err := unix.Open("/run/netns/"+h.ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netnstest: namespace of %s: %w", h.name, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("netnstest: enter the namespace of %s: %w", h.name, err)
	}
	return nil
}

// Isolate cuts the host off from every other host: every packet in or
// out is dropped, loopback aside. It replaces the host's previous cut.
func (h *Host) Isolate() error {
	return restore(h, []string{"-A INPUT ! -i lo -j DROP", "-A OUTPUT ! -o lo -j DROP"})
}

// CutOff cuts the host off from peers only: packets from them and to them
// are dropped, in both directions. It replaces the host's previous cut.
func (h *Host) CutOff(peers ...*Host) error {
	var rules []string
	for _, p := range peers {
		rules = append(rules, "-A INPUT -s "+p.ip+"/32 -j DROP", "-A OUTPUT -d "+p.ip+"/32 -j DROP")
	}
	return restore(h, rules)
}

// Heal removes the host's cut.
func (h *Host) Heal() error { return restore(h, nil) }

// restore replaces the filter table of h's namespace with rules (in
// iptables' syntax, chain INPUT or OUTPUT), in one commit.
func restore(h *Host, rules []string) error {
	table := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" +
		strings.Join(append(rules, "COMMIT"), "\n") + "\n"
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := h.Command(ctx, "iptables-restore")
	cmd.Stdin = strings.NewReader(table)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netnstest: iptables-restore in %s's namespace: %w: %s", h.name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ip runs ip with args.
func ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("netnstest: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
