package cluster

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	protocluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/labstack/echo"
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
//
// The agent lists a node until its provider deregisters it, which
// protoactor does only on a graceful leave: a client's leave (not
// graceful, Config.Client) would leave it listed for good, and the others
// would keep gossiping to it and dialling its address. So the membership's
// close deregisters a node still listed.
func InProcess(agent *test.InMemAgent) Membership {
	return Membership{name: "in-process", start: func(m *Member) (protocluster.ClusterProvider, func(), error) {
		p := test.NewTestProvider(agent, test.WithTestProviderRefreshTtl(200*time.Millisecond))
		return p, func() {
			// Listed means the provider started (it registers last), so
			// its Shutdown, which needs the started cluster, is safe.
			if slices.ContainsFunc(agent.GetStatusHealth(), func(s test.AgentServiceStatus) bool { return s.ID == m.system.ID }) {
				_ = p.Shutdown(false)
			}
		}, nil
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
