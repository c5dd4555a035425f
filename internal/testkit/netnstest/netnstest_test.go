package netnstest

import (
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestCutAndHeal: a listener on one host, dials from another; a cut makes
// them time out (the packets vanish: no refusal), a heal restores them.
func TestCutAndHeal(t *testing.T) {
	t.Parallel()
	n := New(t)
	a, b := n.Add("a"), n.Add("b")
	if a.IP() == b.IP() || n.Host("a") != a || n.Host("c") != nil {
		t.Fatalf("hosts a %s, b %s, lookup a %v", a.IP(), b.IP(), n.Host("a"))
	}
	ln, err := b.Listen("tcp", b.IP()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hi"))
			_ = c.Close()
		}
	}()
	addr := ln.Addr().String()
	steps := []struct {
		name   string
		change func() error
		reach  bool
	}{
		{"connected", func() error { return nil }, true},
		{"a cut off from b", func() error { return a.CutOff(b) }, false},
		{"healed", a.Heal, true},
		{"b isolated", b.Isolate, false},
		{"b cut off from a third host only", func() error { return b.CutOff(n.Add("c")) }, true},
		{"healed again", b.Heal, true},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		err := hello(a, addr)
		switch {
		case s.reach && err != nil:
			t.Errorf("%s: %v", s.name, err)
		case !s.reach && !timedOut(err):
			t.Errorf("%s: dial returned %v, want a timeout", s.name, err)
		}
	}
	// The loopback of an isolated host still works.
	if err := a.Isolate(); err != nil {
		t.Fatal(err)
	}
	self, err := a.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	go func() {
		if c, err := self.Accept(); err == nil {
			_, _ = c.Write([]byte("hi"))
			_ = c.Close()
		}
	}()
	if err := hello(a, self.Addr().String()); err != nil {
		t.Errorf("loopback of an isolated host: %v", err)
	}
}

// timedOut reports whether err is a timeout (a dial whose packets vanished).
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// hello dials addr from h within a second and reads the listener's "hi".
func hello(h *Host, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := h.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hi" {
		return errors.Join(err, errors.New("read "+string(got)))
	}
	return nil
}

// TestProcesses: Start and Command run programs that see the host's
// interface and address, and nothing of the machine's.
func TestProcesses(t *testing.T) {
	t.Parallel()
	n := New(t)
	h := n.Add("solo")
	var out strings.Builder
	cmd := exec.Command("ip", "-o", "-4", "addr", "show")
	cmd.Stdout = &out
	if err := h.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	viaIP, err := h.Command(ctx, "ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]string{"Start": out.String(), "Command": string(viaIP)} {
		lines := strings.Split(strings.TrimSpace(got), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], " lo ") || !strings.Contains(lines[1], " eth0 ") ||
			!strings.Contains(lines[1], " "+h.IP()+"/24 ") {
			t.Errorf("%s: addresses seen:\n%s\nwant lo and eth0 with %s", name, got, h.IP())
		}
	}
	if _, subnet, err := net.ParseCIDR(n.Subnet()); err != nil || !subnet.Contains(net.ParseIP(h.IP())) || !strings.HasPrefix(n.Subnet(), "10.") {
		t.Errorf("subnet %s (%v), address %s", n.Subnet(), err, h.IP())
	}
}
