package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/retry"
)

// Kind names of the shared actors in the protoactor cluster.
const (
	// CredentialsKind is the credentials actor of one provider; its
	// identity is the provider's name.
	CredentialsKind = "musepi-credentials"
	// FallbackKind is the model-fallback actor of one role; its identity
	// is the role.
	FallbackKind = "musepi-fallback"
	// SessionKind is a session (Config.Sessions); its identity is the
	// session id.
	SessionKind = "musepi-session"
)

// Defaults of Config's zero fields.
const (
	DefaultHost            = "127.0.0.1"
	DefaultRequestTimeout  = 2 * time.Second
	DefaultRequestAttempts = 3
)

// Provider is one provider's shared settings: its credentials, and its
// retry budget (kept by the same activation).
type Provider struct {
	Name        string
	Credentials []actors.Credential
	// AutoRedeem lets a usage limit with no free sibling spend a banked
	// reset.
	AutoRedeem bool
	// Budget is the provider's retry budget, one for the whole cluster
	// (Enabled false: none).
	Budget retry.BudgetSettings
	// Pacing paces the provider's turns against its keys' rate limits
	// (configured and announced), one budget for the whole cluster.
	Pacing bool
	// Refunds: the provider gives back the output max_tokens reserved and
	// a call did not use (provider.OutputRefunder).
	Refunds bool
	// StickyWait is how long a turn waits for its session's key before it
	// moves (musepi.WithPacingStickyWait; 0: the default).
	StickyWait time.Duration
	// Overload keeps a concurrency limit per model (musepi.
	// WithOverloadLimiter), the node's own: each node's stand-in for the
	// provider's credentials actor limits the node's turns by what their
	// answers show, as Envoy keeps a limit per host; the activation keeps
	// none (nil: no limit).
	Overload *overload.Settings
}

// Config is one node's configuration. Name, Providers and FallbackChains
// must be the same on every node of a cluster: an activation runs on
// whichever node the identity lookup picks, with that node's settings.
type Config struct {
	// Name is the cluster's name; required, without '/' or '@'.
	Name string
	// Host is the address the node's remote (gRPC) server binds to and
	// advertises; default DefaultHost (loopback). Any other host needs TLS
	// or Insecure.
	Host string
	// Port is the remote server's port; 0 picks a free one.
	Port int
	// AdvertiseHost is the host:port other nodes reach this one at, when
	// it is not Host:Port (NAT, a container); empty: Host:Port. Start
	// refuses a node that cannot connect to its own advertised address
	// (2 s), before it registers with the membership.
	AdvertiseHost string
	// Membership finds the other nodes: Automanaged, Etcd or InProcess.
	// Required.
	Membership Membership
	// TLS, if set, secures the node's remote with mutual TLS: its gRPC
	// server requires and verifies a client certificate of every member
	// that connects, and its dials verify the server certificate of the
	// member they reach, both against the cluster CA, with TLS 1.3 at
	// least (whatever MinVersion and ClientAuth say). It needs
	// Certificates (this node's certificate, presented as server and as
	// client: both extended key usages), and the cluster CA as RootCAs and
	// ClientCAs. The other members dial the host of AdvertiseHost (else
	// Host) and check the certificate against it, so it must carry that
	// host as an IP SAN (an address) or a DNS SAN (a name); with ServerName
	// set, every member checks that name instead. Start refuses a
	// configuration that fails CheckTLS. nil: plaintext, on a loopback Host
	// only unless Insecure.
	TLS *tls.Config
	// Insecure lets a node without TLS bind a Host that is not a loopback
	// address, which Start refuses otherwise: only for a network where
	// every host may talk to the actors.
	Insecure bool

	Providers []Provider
	// FallbackChains are the model fallback chains by role, each an
	// ordered list of "provider/model".
	FallbackChains map[string][]string

	// Sessions, if set, are the props of the session kind's activation
	// (Join sets them); nil: the node hosts no
	// sessions.
	Sessions *actor.Props
	// Client makes the node a member that hosts no activations: it
	// registers no kinds, so the identity lookup never places one on it,
	// and it reaches the others' through its routers and the Resolver.
	Client bool

	// Info is what the node publishes about itself for operators, with
	// the etcd membership (EtcdMembers reads it); the other memberships
	// publish nothing of it.
	Info MemberInfo

	// Blocks, if set (a *pgstore.Store), is where blocks and cooldowns
	// outlive their activations: a new activation also loads them from
	// it, and every change is written to it. nil keeps them in the nodes'
	// memory only.
	Blocks pgstore.Blocks

	// RequestTimeout bounds one attempt of a router's request to an
	// activation; default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// RequestAttempts is how many times a router tries a request (each
	// time looking the activation up again) before it answers the
	// degraded reply (see Router); default DefaultRequestAttempts.
	RequestAttempts int
	// Logger receives protoactor's own logs at Warn and above; nil
	// discards them.
	Logger *slog.Logger
}

// ErrConfig is wrapped by every error about an invalid Config.
var ErrConfig = errors.New("cluster: invalid config")

// withDefaults validates c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Name == "" || strings.ContainsAny(c.Name, "/@") {
		// protoactor's etcd provider keys members by "<prefix>/<name>/<name>@<id>"
		// and reads the id back after the last "/".
		return c, fmt.Errorf("%w: Name %q is empty or has a '/' or '@'", ErrConfig, c.Name)
	}
	if c.Membership.start == nil {
		return c, fmt.Errorf("%w: no Membership (Automanaged, Etcd or InProcess)", ErrConfig)
	}
	if c.Port < 0 || c.Port > 65535 {
		return c, fmt.Errorf("%w: Port %d out of range", ErrConfig, c.Port)
	}
	if c.RequestTimeout < 0 || c.RequestAttempts < 0 {
		return c, fmt.Errorf("%w: negative RequestTimeout or RequestAttempts", ErrConfig)
	}
	if err := checkProviders(c.Providers); err != nil {
		return c, err
	}
	if err := checkFallbackChains(c.FallbackChains); err != nil {
		return c, err
	}
	if c.Host == "" {
		c.Host = DefaultHost
	}
	if err := c.checkTransport(); err != nil {
		return c, err
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.RequestAttempts == 0 {
		c.RequestAttempts = DefaultRequestAttempts
	}
	return c, nil
}

// checkProviders fails unless every provider has a name of its own and
// valid settings.
func checkProviders(providers []Provider) error {
	seen := map[string]bool{}
	for _, p := range providers {
		if p.Name == "" {
			return fmt.Errorf("%w: a provider has no name", ErrConfig)
		}
		if seen[p.Name] {
			return fmt.Errorf("%w: provider %q twice", ErrConfig, p.Name)
		}
		seen[p.Name] = true
		if err := p.check(); err != nil {
			return err
		}
	}
	return nil
}

// check fails unless the provider's credential names are unique and not
// empty, and its budget, when enabled, is valid.
func (p Provider) check() error {
	names := map[string]bool{}
	for _, cr := range p.Credentials {
		if cr.Name == "" || names[cr.Name] {
			return fmt.Errorf("%w: provider %q: credential names must be unique and not empty", ErrConfig, p.Name)
		}
		names[cr.Name] = true
	}
	if p.Budget.Enabled {
		if err := p.Budget.Validate(); err != nil {
			return fmt.Errorf("%w: provider %q: %w", ErrConfig, p.Name, err)
		}
	}
	return nil
}

// checkFallbackChains fails unless every chain has a role and a model.
func checkFallbackChains(chains map[string][]string) error {
	for role, chain := range chains {
		if role == "" || len(chain) == 0 {
			return fmt.Errorf("%w: fallback chain %q is empty or has no role", ErrConfig, role)
		}
	}
	return nil
}
