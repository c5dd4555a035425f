package musepi

// ClusterAddress is the cluster address (host:port) of a runtime of
// cluster.Join; "" for a runtime of NewRuntime.
func (rt *Runtime) ClusterAddress() string {
	if rt.cluster == nil {
		return ""
	}
	return rt.cluster.Member().Address()
}
