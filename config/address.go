package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// CheckBaseURL checks the base URL of an HTTP API: an http:// or
// https:// URL with a host, and a port from 1 to 65535 when it names one.
// base_url and cluster.etcd.endpoints are checked with it, and so is
// musepi's --base-url: one rule for the file and the command line.
func CheckBaseURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil && strings.Contains(s, "://"):
		return fmt.Errorf("invalid URL %q", s)
	case err != nil || u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("want an http:// or https:// URL, got %q", s)
	case u.Hostname() == "":
		return fmt.Errorf("URL %q has no host", s)
	case u.Port() != "" && !validPort(u.Port(), 1):
		return fmt.Errorf("port of URL %q must be 1 to 65535", s)
	}
	return nil
}

// CheckListenAddress checks an address to listen on: host:port, with a
// port from 0 (any free one) to 65535 and a host that is a host name, an
// IP address or empty (every interface). musepi's --metrics-addr and
// fakellm's --listen are checked with it.
func CheckListenAddress(addr string) error {
	_, err := splitAddress(addr, true)
	return err
}

// SplitAddress checks an address to dial, host:port, and returns its
// host: a host name or an IP address, with a port from 1 to 65535 (what
// cluster.advertise_address and cluster.automanaged.peers take).
func SplitAddress(addr string) (string, error) { return splitAddress(addr, false) }

// splitAddress checks the address host:port and returns its host: a host
// name or an IP address, with a port from 1 to 65535; an address to
// listen on (listen) may also have no host and port 0.
func splitAddress(addr string, listen bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" && !listen {
		return "", fmt.Errorf("want host:port, got %q", addr)
	}
	lo := 1
	if listen {
		lo = 0
	}
	if !validPort(port, lo) {
		return "", fmt.Errorf("port of %q must be %d to 65535", addr, lo)
	}
	if host != "" {
		if err := CheckHost(host); err != nil {
			return "", err
		}
	}
	return host, nil
}

// validPort reports whether port is a number from lo to 65535, in digits.
func validPort(port string, lo int) bool {
	n, err := strconv.Atoi(port)
	return err == nil && strings.Trim(port, "0123456789") == "" && n >= lo && n <= 65535
}

// CheckHost checks a host name or IP address (not empty).
func CheckHost(h string) error {
	if _, err := netip.ParseAddr(h); err == nil {
		return nil
	}
	if h == "" || strings.ContainsFunc(h, func(r rune) bool { return r <= ' ' || r == 0x7f || strings.ContainsRune("/:@[]%", r) }) {
		return fmt.Errorf("want a host name or IP address, got %q", h)
	}
	return nil
}
