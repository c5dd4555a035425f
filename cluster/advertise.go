package cluster

import (
	"fmt"
	"net"
	"time"

	protocluster "github.com/asynkron/protoactor-go/cluster"
)

// advertiseDialTimeout bounds the connect with which a node checks that it
// reaches its own advertised address.
const advertiseDialTimeout = 2 * time.Second

// advertised is the membership provider of a node with an AdvertiseHost:
// once the node's remote listens, and before the node registers, it
// connects to its own advertised address. A node that the others cannot
// reach must not become a member: they would place activations on it and
// time out on every request to them.
type advertised struct {
	protocluster.ClusterProvider
}

// StartMember checks the node's advertised address, then registers the
// node. protoactor calls it once its remote listens.
func (p advertised) StartMember(c *protocluster.Cluster) error {
	addr := c.ActorSystem.Address()
	conn, err := net.DialTimeout("tcp", addr, advertiseDialTimeout)
	if err != nil {
		return fmt.Errorf("this node cannot connect to its own advertised address %s, where the other nodes would reach it: %w", addr, err)
	}
	_ = conn.Close()
	return p.ClusterProvider.StartMember(c)
}
