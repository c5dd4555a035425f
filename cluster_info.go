package musepi

import "github.com/musepi/musepi/cluster"

// ClusterAddress is the cluster address (host:port) of a runtime of
// JoinCluster; "" for a runtime of NewRuntime.
func (rt *Runtime) ClusterAddress() string {
	if rt.cluster == nil {
		return ""
	}
	return rt.cluster.member.Address()
}

// ClusterPropagation is how long the credential blocks and model
// cooldowns published by the shared actors on other nodes took to reach
// this node (the zero value for a runtime of NewRuntime).
func (rt *Runtime) ClusterPropagation() cluster.Propagation {
	if rt.cluster == nil {
		return cluster.Propagation{}
	}
	return rt.cluster.member.Propagation()
}
