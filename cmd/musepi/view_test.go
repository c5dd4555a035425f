package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/musepi/musepi/config/clustercfg"
)

// The view's URL names the node's cluster host when the metrics server
// listens on every interface.
func TestViewURL(t *testing.T) {
	for _, tc := range []struct {
		listen string
		c      clustercfg.Cluster
		want   string
	}{
		{"127.0.0.1:9100", clustercfg.Cluster{Host: "127.0.0.1"}, "http://127.0.0.1:9100/cluster/members"},
		{"10.0.0.2:9100", clustercfg.Cluster{Host: "0.0.0.0", AdvertiseAddress: "203.0.113.7:7001"}, "http://10.0.0.2:9100/cluster/members"},
		{"0.0.0.0:9100", clustercfg.Cluster{Host: "0.0.0.0", AdvertiseAddress: "203.0.113.7:7001"}, "http://203.0.113.7:9100/cluster/members"},
		{"[::]:9100", clustercfg.Cluster{Host: "10.0.0.2"}, "http://10.0.0.2:9100/cluster/members"},
		{"[::1]:9100", clustercfg.Cluster{Host: "::1"}, "http://[::1]:9100/cluster/members"},
	} {
		addr, err := net.ResolveTCPAddr("tcp", tc.listen)
		if err != nil {
			t.Fatal(err)
		}
		if got := viewURL(addr, &tc.c); got != tc.want {
			t.Errorf("viewURL(%s, host %q, advertise %q) = %q, want %q", tc.listen, tc.c.Host, tc.c.AdvertiseAddress, got, tc.want)
		}
	}
}

// A node that is joining or leaving answers 503.
func TestViewWithoutRuntime(t *testing.T) {
	rec := httptest.NewRecorder()
	(&memberView{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/cluster/members", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", rec.Code)
	}
}
