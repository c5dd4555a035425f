package config

import (
	"strings"
	"testing"
)

// CheckBaseURL is the one rule for base_url, cluster.etcd.endpoints and
// musepi's --base-url.
func TestCheckBaseURL(t *testing.T) {
	for _, tc := range []struct {
		url, want string // want: "" for accepted, else what the error says
	}{
		{"http://127.0.0.1:8089/v1", ""},
		{"https://api.openai.com/v1/", ""},
		{"HTTPS://api.anthropic.com", ""},
		{"http://[::1]:8089/v1", ""},
		{"http://localhost/v1", ""},
		{"127.0.0.1:8089/v1", `want an http:// or https:// URL, got "127.0.0.1:8089/v1"`},
		{"localhost:8089/v1", `want an http:// or https:// URL, got "localhost:8089/v1"`},
		{"api.openai.com/v1", `want an http:// or https:// URL, got "api.openai.com/v1"`},
		{"ftp://example.com/v1", `want an http:// or https:// URL, got "ftp://example.com/v1"`},
		{"", `want an http:// or https:// URL, got ""`},
		{"https:///v1", `URL "https:///v1" has no host`},
		{"http://:8089/v1", `URL "http://:8089/v1" has no host`},
		{"http://[::1", `invalid URL "http://[::1"`},
		{"http://a b/v1", `invalid URL "http://a b/v1"`},
		{"http://127.0.0.1:x/v1", `invalid URL "http://127.0.0.1:x/v1"`},
		{"http://127.0.0.1:65536/v1", `port of URL "http://127.0.0.1:65536/v1" must be 1 to 65535`},
		{"http://127.0.0.1:0/v1", `port of URL "http://127.0.0.1:0/v1" must be 1 to 65535`},
	} {
		checkAddress(t, "CheckBaseURL", tc.url, CheckBaseURL(tc.url), tc.want)
	}
}

// CheckListenAddress is the rule for musepi's --metrics-addr and
// fakellm's --listen; SplitAddress is the one for
// cluster.advertise_address and cluster.automanaged.peers.
func TestCheckAddress(t *testing.T) {
	for _, tc := range []struct {
		addr         string
		listen, dial string // what each says: "" for accepted
	}{
		{"127.0.0.1:8089", "", ""},
		{"localhost:0", "", `port of "localhost:0" must be 1 to 65535`},
		{"[::1]:9465", "", ""},
		{":9465", "", `want host:port, got ":9465"`},
		{"no-port", `want host:port, got "no-port"`, `want host:port, got "no-port"`},
		{"", `want host:port, got ""`, `want host:port, got ""`},
		{"http://127.0.0.1:8089", `want host:port, got "http://127.0.0.1:8089"`, `want host:port, got "http://127.0.0.1:8089"`},
		{"127.0.0.1:65536", `port of "127.0.0.1:65536" must be 0 to 65535`, `port of "127.0.0.1:65536" must be 1 to 65535`},
		{"127.0.0.1:-1", `port of "127.0.0.1:-1" must be 0 to 65535`, `port of "127.0.0.1:-1" must be 1 to 65535`},
		{"127.0.0.1:+80", `port of "127.0.0.1:+80" must be 0 to 65535`, `port of "127.0.0.1:+80" must be 1 to 65535`},
		{"127.0.0.1:http", `port of "127.0.0.1:http" must be 0 to 65535`, `port of "127.0.0.1:http" must be 1 to 65535`},
		{"a/b:80", `want a host name or IP address, got "a/b"`, `want a host name or IP address, got "a/b"`},
		{"a b:80", `want a host name or IP address, got "a b"`, `want a host name or IP address, got "a b"`},
	} {
		checkAddress(t, "CheckListenAddress", tc.addr, CheckListenAddress(tc.addr), tc.listen)
		_, err := SplitAddress(tc.addr)
		checkAddress(t, "SplitAddress", tc.addr, err, tc.dial)
	}
}

// checkAddress checks that fn's error for s says want ("": none).
func checkAddress(t *testing.T, fn, s string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s(%q) = %v, want it accepted", fn, s, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("%s(%q) = %v, want %q", fn, s, err, want)
	}
}
