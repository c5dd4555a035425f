package main

import (
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/cmd/musepi/internal/opsview"
	"github.com/musepi/musepi/config/clustercfg"
)

// memberView serves, on opsview.ViewPath of `musepi node --metrics-addr`,
// the members the node sees, read-only, for `musepi cluster status`. The
// node sets the runtime it runs (a node that was dropped joins again with
// a new one), and clears it while it joins and leaves.
type memberView struct {
	rt atomic.Pointer[musepi.Runtime]
}

// ServeHTTP answers an opsview.NodeView, or 503 while the node is no
// member.
func (v *memberView) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	rt := v.rt.Load()
	if rt == nil {
		http.Error(w, "not a member now (joining or leaving)", http.StatusServiceUnavailable)
		return
	}
	members := rt.ClusterMembers()
	slices.Sort(members)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(opsview.NodeView{Address: rt.ClusterAddress(), Members: append([]string{}, members...)})
}

// viewURL is where other hosts read the view served at addr: its host is
// the node's cluster host (advertise_address's, else host) when addr
// listens on every interface.
func viewURL(addr net.Addr, c *clustercfg.Cluster) string {
	host, port, _ := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = c.Host
		if c.AdvertiseAddress != "" {
			host, _, _ = net.SplitHostPort(c.AdvertiseAddress)
		}
	}
	return "http://" + net.JoinHostPort(host, port) + opsview.ViewPath
}
