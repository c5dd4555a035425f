package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	protocluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/labstack/echo"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Membership is how a node finds the others: one of protoactor's cluster
// providers.
type Membership struct {
	name string
	// start returns the provider for node m (whose cluster is built once
	// the provider is), and what to close after the node has shut down.
	start func(m *Member) (protocluster.ClusterProvider, func(), error)
}

// InProcess is protoactor's test provider: the nodes of one process that
// share agent form a cluster. For tests.
func InProcess(agent *test.InMemAgent) Membership {
	return Membership{name: "in-process", start: func(*Member) (protocluster.ClusterProvider, func(), error) {
		return test.NewTestProvider(agent, test.WithTestProviderRefreshTtl(200*time.Millisecond)), func() {}, nil
	}}
}

// AutomanagedConfig configures protoactor's automanaged provider, which
// needs no coordination service: each node serves its identity over HTTP
// and polls the others'.
type AutomanagedConfig struct {
	// Host and Port are where this node serves its /_health endpoint
	// (Host default DefaultHost, loopback); Port is required.
	Host string
	Port int
	// Peers are the host:port of every node's endpoint, this one included.
	Peers []string
	// Refresh is how often the peers are polled (default 1 s): a node
	// that stops answering leaves the cluster within about this long.
	Refresh time.Duration
}

// Automanaged is protoactor's automanaged provider. Unlike protoactor's
// own constructor, which listens on 0.0.0.0, the endpoint listens on
// cfg.Host only.
func Automanaged(cfg AutomanagedConfig) Membership {
	return Membership{name: "automanaged", start: func(m *Member) (protocluster.ClusterProvider, func(), error) {
		if cfg.Port <= 0 || cfg.Port > 65535 || len(cfg.Peers) == 0 {
			return nil, nil, fmt.Errorf("%w: automanaged needs a Port and Peers", ErrConfig)
		}
		host := cfg.Host
		if host == "" {
			host = DefaultHost
		}
		refresh := cfg.Refresh
		if refresh <= 0 {
			refresh = time.Second
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(cfg.Port)))
		if err != nil {
			return nil, nil, fmt.Errorf("cluster: automanaged endpoint: %w", err)
		}
		e := echo.New()
		e.HideBanner, e.HidePort = true, true
		e.Listener = ln
		// The route protoactor's constructor would add, answering the same
		// node description (its own is unexported).
		e.GET("/_health", func(ctx echo.Context) error {
			c := m.cluster
			chost, cport, err := c.ActorSystem.GetHostPort()
			if err != nil {
				return err
			}
			return ctx.JSON(http.StatusOK, automanaged.NewNode(c.Config.Name, c.ActorSystem.ID, chost, cport, cfg.Port, c.GetClusterKinds()))
		})
		return automanaged.NewWithTesting(refresh, cfg.Port, e, cfg.Peers...), func() { _ = ln.Close() }, nil
	}}
}

// EtcdConfig configures protoactor's etcd provider.
type EtcdConfig struct {
	// Endpoints are the etcd client URLs; required.
	Endpoints []string
	// Prefix is the key prefix of the cluster's members (default
	// "/musepi").
	Prefix string
	// DialTimeout bounds connecting to etcd (default 5 s).
	DialTimeout time.Duration
	// TLS, if set, is the etcd client's TLS: RootCAs verify etcd's server
	// certificate, Certificates (optional) are the client certificate
	// etcd's --client-cert-auth asks for. It applies to https://
	// endpoints; the client dials http:// ones in plaintext.
	TLS *tls.Config
}

// Etcd is protoactor's etcd provider: each node holds a key under a 3 s
// lease and watches the others'.
func Etcd(cfg EtcdConfig) Membership {
	return Membership{name: "etcd", start: func(*Member) (protocluster.ClusterProvider, func(), error) {
		if len(cfg.Endpoints) == 0 {
			return nil, nil, fmt.Errorf("%w: etcd needs Endpoints", ErrConfig)
		}
		prefix := cfg.Prefix
		if prefix == "" {
			prefix = "/musepi"
		}
		dial := cfg.DialTimeout
		if dial <= 0 {
			dial = 5 * time.Second
		}
		// protoactor's provider never closes its etcd client. Cancelling
		// the client's context once the node has left ends the client's
		// watch; its lease loops and gRPC connection stay until the
		// process exits (docs/cluster.md).
		ctx, cancel := context.WithCancel(context.Background())
		p, err := etcd.NewWithConfig(prefix, clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: dial, Context: ctx, TLS: cfg.TLS})
		if err != nil {
			cancel()
			return nil, nil, fmt.Errorf("cluster: etcd client: %w", err)
		}
		return p, cancel, nil
	}}
}
