package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// sessionScenarios is how many scenarios TestSessionKind's child runs.
const sessionScenarios = 9

// TestJoinClusterRefuses: what Join refuses, before it starts a
// member.
func TestJoinClusterRefuses(t *testing.T) {
	mb := cluster.InProcess(test.NewInMemAgent())
	unused := &pgstore.Store{} // refused before the store is used
	llm := musepi.WithProvider("p", provider.NewScripted())
	for _, tc := range []struct {
		name string
		cc   cluster.JoinConfig
		opts []musepi.Option
		want string
	}{
		{"no store", cluster.JoinConfig{Name: "c", Membership: mb}, []musepi.Option{llm}, "no Store"},
		{"negative handover timeout", cluster.JoinConfig{Name: "c", Membership: mb, Store: unused, HandoverTimeout: -time.Second},
			[]musepi.Option{llm}, "negative HandoverTimeout"},
		{"a virtual clock", cluster.JoinConfig{Name: "c", Membership: mb, Store: unused},
			[]musepi.Option{llm, musepi.WithClock(clock.NewVirtual(time.Unix(0, 0)))}, "wall clock"},
		{"an invalid option", cluster.JoinConfig{Name: "c", Membership: mb, Store: unused},
			[]musepi.Option{musepi.WithProvider("", nil)}, "WithProvider"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := cluster.Join(context.Background(), tc.cc, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				if rt != nil {
					_ = rt.Shutdown(context.Background())
				}
				t.Fatalf("Join = %v; want an error about %q", err, tc.want)
			}
		})
	}
}

// TestSessionKind runs the session kind's scenarios on 3 runtimes of
// Join in one process (protoactor's in-process provider), in a
// child process judged like TestSharedActors', over a private PostgreSQL.
func TestSessionKind(t *testing.T) {
	switch os.Getenv(childEnv) {
	case "":
		t.Parallel() // with TestSharedActors' children: each mostly waits
		runChild(t, "^TestSessionKind$", "sessions", sessionScenarios)
		return
	case "sessions":
	default:
		t.Skip("another child")
	}
	// Runs after the runtimes have left and the database has stopped
	// (cleanups run last first). TestMain's check does not do: it checks
	// only a run that passed, and protoactor's tolerated races fail the
	// child under the race detector.
	t.Cleanup(func() {
		if err := goleak.Find(leakyDependencies...); err != nil {
			t.Error(failed, err)
		}
	})
	server := pgtest.Start(t)
	url := server.NewDatabase(t)
	llm := provider.NewScripted(provider.Outcome{Message: provider.Text("ok")})
	agent := test.NewInMemAgent()
	name := clusterName(t)
	nodes := make([]*musepi.Runtime, 0, 3)
	t.Cleanup(func() {
		for _, rt := range nodes {
			_ = rt.Shutdown(context.Background())
		}
	})
	join := func(node string) *musepi.Runtime { return joinNode(t, url, name, node, agent, llm, false) }
	for i := range 3 {
		nodes = append(nodes, join(fmt.Sprintf("node%d", i+1)))
	}
	waitMembers(t, 3, nodes...)
	client := joinNode(t, url, name, "client", agent, llm, true)
	t.Cleanup(func() { _ = client.Shutdown(context.Background()) })
	waitMembers(t, 4, append([]*musepi.Runtime{client}, nodes...)...)
	c := &sessionCluster{nodes: nodes, client: client, llm: llm, join: func() *musepi.Runtime {
		rt := join("node4")
		nodes = append(nodes, rt)
		return rt
	}}
	for _, sc := range []struct {
		name string
		run  func(*testing.T, *sessionCluster)
	}{
		{"sessions spread over all 3 members", spread},
		{"prompt from member 1 to a session on member 3", remotePrompt},
		{"a client reaches sessions and hosts none; close and reopen elsewhere", clientAndClose},
		{"controls through a handle: model, thinking, abort, abort retry, ctx", controls},
		{"429 for a key on node 1 moves nodes 2 and 3 to the other key", sharedKeyBlock},
		{"a node joins: the sessions that move continue on it", nodeJoins},
		{"the hosting member leaves mid-backoff", hostLeaves},
		{"the hosting member leaves during a turn: the turn is answered", leaveDuringTurn},
		{"every history complete in the database", func(t *testing.T, c *sessionCluster) { checkHistories(t, url) }},
	} {
		t.Run(sc.name, func(t *testing.T) {
			sc.run(t, c)
			t.Log(scenarioDone)
		})
	}
}

// joinNode starts a runtime of Join on the in-process membership
// agent, with provider "p" (keys A and B) played by llm and a 1.5 s base
// delay, its history in the database at url.
func joinNode(tb testing.TB, url, clusterName, node string, agent *test.InMemAgent, llm *provider.Scripted, client bool) *musepi.Runtime {
	tb.Helper()
	store, err := pgstore.Connect(context.Background(), url, pgstore.WithNode(node), pgstore.WithLease(time.Second))
	if err != nil {
		tb.Fatal(failed, err)
	}
	settings := retry.DefaultSettings()
	settings.BaseDelay = 1500 * time.Millisecond
	rt, err := cluster.Join(context.Background(), cluster.JoinConfig{Name: clusterName, Membership: cluster.InProcess(agent),
		Store: store, HandoverTimeout: 3 * time.Second, Client: client},
		musepi.WithProvider("p", llm, musepi.Credential{Name: "A", APIKey: "key-a"}, musepi.Credential{Name: "B", APIKey: "key-b"}),
		musepi.WithRetrySettings(settings))
	if err != nil {
		_ = store.Close()
		tb.Fatal(failed, err)
	}
	return rt
}

// waitMembers waits until every runtime of rts sees n members.
func waitMembers(tb testing.TB, n int, rts ...*musepi.Runtime) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, rt := range rts {
		for len(rt.ClusterMembers()) != n {
			if time.Now().After(deadline) {
				tb.Fatalf(failed+"a node sees %d members, want %d", len(rt.ClusterMembers()), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

type sessionCluster struct {
	nodes  []*musepi.Runtime
	client *musepi.Runtime
	join   func() *musepi.Runtime // starts a 4th node
	llm    *provider.Scripted
	mu     sync.Mutex
	next   int
}

// open opens a new session through node from and returns it with the
// index of the node that hosts it (the one whose hosted count grew).
func (c *sessionCluster) open(t *testing.T, from int) (*musepi.Session, int) {
	t.Helper()
	c.mu.Lock()
	c.next++
	id := fmt.Sprintf("s-%d", c.next)
	c.mu.Unlock()
	before := make([]int, len(c.nodes))
	for i, rt := range c.nodes {
		before[i] = rt.Stats().Sessions
	}
	s, err := c.nodes[from].NewSession(context.Background(), musepi.WithSessionID(id), musepi.WithModel("p/m1"))
	if err != nil {
		t.Fatalf(failed+"NewSession %s: %v", id, err)
	}
	for i, rt := range c.nodes {
		if rt.Stats().Sessions > before[i] {
			return s, i
		}
	}
	t.Fatalf(failed+"session %s is hosted by no node", id)
	return nil, -1
}

// openOn opens sessions through node from until one is hosted on node on.
func (c *sessionCluster) openOn(t *testing.T, from, on int) *musepi.Session {
	t.Helper()
	for range 60 {
		if s, at := c.open(t, from); at == on {
			return s
		}
	}
	t.Fatalf(failed+"no session landed on node %d", on+1)
	return nil
}

func spread(t *testing.T, c *sessionCluster) {
	hosts := map[int]int{}
	for range 36 { // a node gets none of them once in 700,000 runs
		s, at := c.open(t, 0)
		if _, err := s.Prompt(context.Background(), "hi"); err != nil {
			t.Fatalf(failed+"prompt on %s (node %d): %v", s.ID(), at+1, err)
		}
		hosts[at]++
	}
	t.Logf("36 sessions opened through node 1, hosted: node 1 %d, node 2 %d, node 3 %d", hosts[0], hosts[1], hosts[2])
	if len(hosts) != 3 {
		t.Errorf(failed+"sessions hosted on %d nodes; want all 3: %v", len(hosts), hosts)
	}
}

func clientAndClose(t *testing.T, c *sessionCluster) {
	ctx := context.Background()
	if _, err := c.client.NewSession(ctx, musepi.WithSessionID("steered"), musepi.WithModel("p/m1"),
		musepi.WithSteering(func() []string { return nil })); err == nil || !strings.Contains(err.Error(), "WithSteering") {
		t.Errorf(failed+"NewSession with WithSteering in cluster mode = %v; want it refused", err)
	}
	var ids []string
	for i := range 6 {
		id := fmt.Sprintf("client-%d", i)
		s, err := c.client.NewSession(ctx, musepi.WithSessionID(id), musepi.WithModel("p/m1"))
		if err != nil {
			t.Fatalf(failed+"NewSession through the client: %v", err)
		}
		if msg, err := s.Prompt(ctx, "hi"); err != nil || msg.Text() != "ok" {
			t.Fatalf(failed+"prompt through the client: %v, %v", msg, err)
		}
		ids = append(ids, id)
	}
	if n := c.client.Stats().Sessions; n != 0 {
		t.Errorf(failed+"the client hosts %d sessions; want none", n)
	}
	if got := len(c.client.Sessions()); got != 6 {
		t.Errorf(failed+"the client has %d handles; want 6", got)
	}
	s, _ := c.client.Session(ids[0])
	if err := s.Close(ctx); err != nil {
		t.Fatalf(failed+"close through the client: %v", err)
	}
	if _, err := s.Prompt(ctx, "after close"); !errors.Is(err, musepi.ErrSessionClosed) {
		t.Errorf(failed+"prompt on a closed handle = %v; want ErrSessionClosed", err)
	}
	again, err := c.nodes[1].NewSession(ctx, musepi.WithSessionID(ids[0]), musepi.WithModel("p/m1"))
	if err != nil {
		t.Fatalf(failed+"reopen through node 2: %v", err)
	}
	if _, err := again.Prompt(ctx, "again"); err != nil {
		t.Fatalf(failed+"prompt after reopening: %v", err)
	}
	h, err := again.History(ctx)
	if err != nil || len(h) != 4 {
		t.Errorf(failed+"history after close and reopen: %d entries, %v; want 4", len(h), err)
	}
}

// controls: the Session methods besides Prompt, on a session hosted on
// node 2 through node 1's handle.
func controls(t *testing.T, c *sessionCluster) {
	ctx := context.Background()
	s := c.openOn(t, 0, 1)
	if err := s.SetModel(ctx, "p/m2"); err != nil || s.Model() != "p/m2" {
		t.Errorf(failed+"SetModel through a handle: %v, model %q; want p/m2", err, s.Model())
	}
	if err := s.SetModel(ctx, "nope/m"); err == nil {
		t.Errorf(failed + "SetModel to an unknown provider through a handle succeeded")
	}
	s.SetThinkingLevel(provider.ThinkingHigh)
	if got := s.ThinkingLevel(); got != provider.ThinkingHigh {
		t.Errorf(failed+"ThinkingLevel through a handle = %q; want high", got)
	}
	s.SetAutoRetryEnabled(false)
	if s.AutoRetryEnabled() {
		t.Errorf(failed + "AutoRetryEnabled through a handle after switching it off")
	}
	s.SetAutoRetryEnabled(true)

	// AbortRetry during a backoff.
	c.llm.SetScript(s.ID(), provider.Outcome{Message: provider.Failure(503, "overloaded", nil)},
		provider.Outcome{Block: true})
	retrying := make(chan struct{}, 1)
	unsub := s.Subscribe(func(ev musepi.Event) {
		if ev.Type() == "auto_retry_start" {
			select {
			case retrying <- struct{}{}:
			default:
			}
		}
	})
	defer unsub()
	done := make(chan error, 1)
	s.PromptAsync(ctx, "hi", func(_ *musepi.AssistantMessage, err error) { done <- err })
	select {
	case <-retrying:
	case <-time.After(10 * time.Second):
		t.Fatal(failed + "no auto_retry_start")
	}
	// The state the host publishes after the step whose event came first.
	for deadline := time.Now().Add(2 * time.Second); !s.IsRetrying(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf(failed + "IsRetrying through a handle stays false during a backoff")
			break
		}
	}
	s.AbortRetry()
	if err := waitErr(t, done); !errors.Is(err, musepi.ErrRetryCancelled) {
		t.Errorf(failed+"prompt after AbortRetry through a handle: %v; want ErrRetryCancelled", err)
	}

	// Abort during a turn (the script's Block outcome streams until
	// cancelled).
	c.llm.SetScript(s.ID(), provider.Outcome{Block: true})
	started := make(chan struct{})
	var once sync.Once
	c.llm.OnCall(func(req provider.Request) {
		if req.SessionID == s.ID() {
			once.Do(func() { close(started) })
		}
	})
	defer c.llm.OnCall(nil)
	s.PromptAsync(ctx, "hi", func(_ *musepi.AssistantMessage, err error) { done <- err })
	<-started
	s.Abort()
	if err := waitErr(t, done); !errors.Is(err, musepi.ErrAborted) {
		t.Errorf(failed+"prompt after Abort through a handle: %v; want ErrAborted", err)
	}

	// The caller's context ends during a turn.
	c.llm.SetScript(s.ID(), provider.Outcome{Block: true})
	cctx, cancel := context.WithCancel(ctx)
	started2 := make(chan struct{})
	var once2 sync.Once
	c.llm.OnCall(func(req provider.Request) {
		if req.SessionID == s.ID() {
			once2.Do(func() { close(started2) })
		}
	})
	s.PromptAsync(cctx, "hi", func(_ *musepi.AssistantMessage, err error) { done <- err })
	<-started2
	cancel()
	if err := waitErr(t, done); !errors.Is(err, context.Canceled) {
		t.Errorf(failed+"prompt whose context ended: %v; want context.Canceled", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Busy() {
		if time.Now().After(deadline) {
			t.Fatal(failed + "the session stays busy after its caller's context ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitErr(t *testing.T, done chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal(failed + "the prompt never ended")
		return nil
	}
}

func remotePrompt(t *testing.T, c *sessionCluster) {
	s := c.openOn(t, 0, 2)
	c.llm.SetScript(s.ID(), provider.Outcome{Deltas: []provider.Delta{{Kind: "text", Text: "hel"}, {Kind: "text", Text: "lo"}},
		Message: provider.Text("hello")})
	var mu sync.Mutex
	var types []string
	unsub := s.Subscribe(func(ev musepi.Event) {
		mu.Lock()
		types = append(types, ev.Type())
		mu.Unlock()
	})
	defer unsub()
	settled := make(chan struct{}, 1)
	unsubAll := c.nodes[0].Subscribe(func(ev musepi.Event) {
		if ev.Header().SessionID == s.ID() && ev.Type() == "agent_settled" {
			settled <- struct{}{}
		}
	})
	defer unsubAll()
	msg, err := s.Prompt(context.Background(), "hi")
	if err != nil || msg.Text() != "hello" {
		t.Fatalf(failed+"prompt from node 1 to node 3: %v, %v", msg, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		seen := append([]string(nil), types...)
		mu.Unlock()
		if len(seen) > 0 && seen[len(seen)-1] == "agent_settled" {
			time.Sleep(100 * time.Millisecond) // a second one would come now
			mu.Lock()
			seen = append([]string(nil), types...)
			mu.Unlock()
			if n := count(seen, "agent_settled"); n != 1 {
				t.Errorf(failed+"events on node 1: %v; want one agent_settled, got %d", seen, n)
			}
			if seen[0] != "agent_start" || !contains(seen, "message_update") {
				t.Errorf(failed+"events on node 1: %v; want agent_start, message_update ... agent_settled", seen)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf(failed+"events on node 1: %v; want them to end with agent_settled", seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-settled:
	case <-time.After(5 * time.Second):
		t.Errorf(failed + "node 1's Runtime.Subscribe never saw the session's agent_settled")
	}
	h, err := s.History(context.Background())
	if err != nil || len(h) != 2 {
		t.Errorf(failed+"history through node 1: %d entries, %v; want 2", len(h), err)
	}
	if s.Busy() || s.Model() != "p/m1" || s.Generation() != 1 {
		t.Errorf(failed+"state through node 1: busy %v, model %q, generation %d; want idle, p/m1, 1", s.Busy(), s.Model(), s.Generation())
	}
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sharedKeyBlock(t *testing.T, c *sessionCluster) {
	x := c.openOn(t, 0, 0)
	y := c.openOn(t, 0, 1)
	z := c.openOn(t, 0, 2)
	c.llm.SetScript(x.ID(), provider.Outcome{Message: provider.Failure(429, "You exceeded your current quota: insufficient_quota", nil)},
		provider.Outcome{Message: provider.Text("ok")})
	if _, err := x.Prompt(context.Background(), "hi"); err != nil {
		t.Fatalf(failed+"prompt on node 1: %v", err)
	}
	for _, s := range []*musepi.Session{y, z} {
		if _, err := s.Prompt(context.Background(), "hi"); err != nil {
			t.Fatalf(failed+"prompt on %s: %v", s.ID(), err)
		}
	}
	var xs, ys, zs []string
	for _, call := range c.llm.Calls() {
		switch call.SessionID {
		case x.ID():
			xs = append(xs, call.Credential)
		case y.ID():
			ys = append(ys, call.Credential)
		case z.ID():
			zs = append(zs, call.Credential)
		}
	}
	// Selection spreads sessions over the keys: whichever key node 1's
	// session met the 429 with is blocked for every node.
	if len(xs) != 2 || xs[0] == xs[1] {
		t.Fatalf(failed+"node 1's session called with %v; want the 429's key, then the other", xs)
	}
	other := xs[1]
	if len(ys) != 1 || ys[0] != other || len(zs) != 1 || zs[0] != other {
		t.Errorf(failed+"nodes 2 and 3 called with %v and %v; want %s only (%s blocked through node 1)", ys, zs, other, xs[0])
	}
}

func hostLeaves(t *testing.T, c *sessionCluster) {
	ctx := context.Background()
	// An idle session on node 3 with a second handle, on the client, that
	// has met its activation there.
	idle := c.openOn(t, 0, 2)
	second, err := c.client.NewSession(ctx, musepi.WithSessionID(idle.ID()), musepi.WithModel("p/m1"))
	if err != nil {
		t.Fatalf(failed+"second handle: %v", err)
	}
	if _, err := second.History(ctx); err != nil {
		t.Fatalf(failed+"second handle: %v", err)
	}
	members := len(c.client.ClusterMembers())
	s := c.openOn(t, 0, 2)
	c.llm.SetScript(s.ID(), provider.Outcome{Message: provider.Failure(503, "overloaded", nil)},
		provider.Outcome{Message: provider.Failure(503, "overloaded", nil)},
		provider.Outcome{Message: provider.Text("after the move")}, provider.Outcome{Message: provider.Text("answered again")})
	backoff := make(chan struct{}, 1)
	var mu sync.Mutex
	var attempts []int
	unsub := s.Subscribe(func(ev musepi.Event) {
		if start, ok := ev.(musepi.AutoRetryStart); ok {
			mu.Lock()
			attempts = append(attempts, start.Attempt)
			mu.Unlock()
			select {
			case backoff <- struct{}{}:
			default:
			}
		}
	})
	defer unsub()
	type result struct {
		msg *musepi.AssistantMessage
		err error
	}
	done := make(chan result, 1)
	s.PromptAsync(context.Background(), "hi", func(msg *musepi.AssistantMessage, err error) { done <- result{msg, err} })
	select {
	case <-backoff:
	case <-time.After(10 * time.Second):
		t.Fatal(failed + "no auto_retry_start seen on node 1")
	}
	start := time.Now()
	if err := c.nodes[2].Shutdown(context.Background()); err != nil {
		t.Errorf(failed+"node 3 leaves: %v", err)
	}
	t.Logf("node 3 left in %v", time.Since(start))
	select {
	case r := <-done:
		if r.err != nil || r.msg.Text() != "after the move" {
			t.Errorf(failed+"the prompt waiting in a backoff on node 3: %v, %v; want it answered after the move", r.msg, r.err)
		}
		t.Logf("the prompt waiting on node 3 was answered %v after node 3 began to leave", time.Since(start))
	case <-time.After(20 * time.Second):
		t.Fatal(failed + "the prompt waiting on node 3 never ended")
	}
	mu.Lock()
	seen := append([]int(nil), attempts...)
	mu.Unlock()
	if len(seen) != 2 || seen[0] != 1 || seen[1] != 2 {
		t.Errorf(failed+"auto_retry_start attempts seen on node 1: %v; want 1 on node 3, then 2 carried on after the move", seen)
	}
	msg, err := s.Prompt(context.Background(), "again")
	if err != nil || msg.Text() != "answered again" {
		t.Fatalf(failed+"prompt after node 3 left: %v, %v", msg, err)
	}
	h, err := s.History(context.Background())
	if err != nil || len(h) != 6 {
		t.Errorf(failed+"history after the move: %d entries, %v; want 6 (prompt, 503, 503, answer, prompt, answer)", len(h), err)
	}

	// The idle session wakes elsewhere through node 1's handle; the
	// client's handle, which lost its activation with node 3, closes the
	// new one.
	waitMembers(t, members-1, c.client)
	if _, err := idle.Prompt(ctx, "wake up"); err != nil {
		t.Fatalf(failed+"prompt on the idle session after node 3 left: %v", err)
	}
	before := hostedSessions(c.nodes)
	if err := second.Close(ctx); err != nil {
		t.Errorf(failed+"close through the handle that lost its activation: %v", err)
	}
	if after := hostedSessions(c.nodes); after != before-1 {
		t.Errorf(failed+"%d sessions hosted after the close, %d before; want the woken session closed", after, before)
	}
}

// hostedSessions is how many sessions the running nodes of rts host.
func hostedSessions(rts []*musepi.Runtime) int {
	n := 0
	for _, rt := range rts {
		n += rt.Stats().Sessions
	}
	return n
}

func nodeJoins(t *testing.T, c *sessionCluster) {
	ctx := context.Background()
	var sessions []*musepi.Session
	for range 40 { // each moves to the 4th node with odds 1/4: none does once in 100,000 runs

		s, _ := c.open(t, 0)
		if _, err := s.Prompt(ctx, "before"); err != nil {
			t.Fatalf(failed+"prompt before the join: %v", err)
		}
		sessions = append(sessions, s)
	}
	n4 := c.join()
	c.nodes = append(c.nodes, n4)
	waitMembers(t, 5, append([]*musepi.Runtime{c.client}, c.nodes...)...)
	readsPlaceNothing(t, c.nodes, sessions, n4)
	// The first half go on; the second half are closed through handles
	// that have not yet met their session's new activation.
	start := time.Now()
	for _, s := range sessions[:20] {
		if _, err := s.Prompt(ctx, "after"); err != nil {
			t.Fatalf(failed+"prompt on %s after the join: %v", s.ID(), err)
		}
		if h, err := s.History(ctx); err != nil || len(h) != 4 {
			t.Errorf(failed+"%s's history after the join: %d entries, %v; want 4", s.ID(), len(h), err)
		}
	}
	moved := n4.Stats().Sessions
	t.Logf("after node 4 joined, %d of 20 sessions moved to it; 20 prompts took %v", moved, time.Since(start))
	if moved == 0 {
		t.Errorf(failed + "no session moved to the node that joined")
	}
	for _, s := range sessions[20:] {
		if err := s.Close(ctx); err != nil {
			t.Errorf(failed+"close %s after the join: %v", s.ID(), err)
		}
	}
}

// readsPlaceNothing: once the sessions that moved have left their old
// nodes, reading their state through handles that know no activation now
// opens none: the new node hosts nothing until a prompt comes, and the
// reads answer from the handles' mirrors.
func readsPlaceNothing(t *testing.T, nodes []*musepi.Runtime, sessions []*musepi.Session, joined *musepi.Runtime) {
	t.Helper()
	hosted, still := hostedSessions(nodes), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Since(still) < 500*time.Millisecond; time.Sleep(20 * time.Millisecond) {
		if n := hostedSessions(nodes); n != hosted {
			hosted, still = n, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf(failed + "the sessions hosted kept changing 10 s after the join")
		}
	}
	for _, s := range sessions {
		if s.Model() != "p/m1" || s.Busy() {
			t.Errorf(failed+"%s read after the join: model %q, busy %v; want p/m1, idle", s.ID(), s.Model(), s.Busy())
		}
	}
	if n := joined.Stats().Sessions; n != 0 || hostedSessions(nodes) != hosted {
		t.Errorf(failed+"reads placed sessions: the new node hosts %d, all nodes %d (before the reads %d)", n, hostedSessions(nodes), hosted)
	}
	t.Logf("after node 4 joined: %d sessions hosted in all, none on node 4; reads of %d handles placed none", hosted, len(sessions))
}

func leaveDuringTurn(t *testing.T, c *sessionCluster) {
	ctx := context.Background()
	s := c.openOn(t, 0, 1)
	c.llm.SetScript(s.ID(), provider.Outcome{Message: provider.Text("answered during the leave")},
		provider.Outcome{Message: provider.Text("answered after the leave")})
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.llm.OnCall(func(req provider.Request) {
		if req.SessionID == s.ID() {
			once.Do(func() {
				close(started)
				<-release
			})
		}
	})
	defer c.llm.OnCall(nil)
	type result struct {
		msg *musepi.AssistantMessage
		err error
	}
	done := make(chan result, 1)
	go func() {
		msg, err := s.Prompt(ctx, "hi")
		done <- result{msg, err}
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal(failed + "the turn never started")
	}
	left := make(chan error, 1)
	go func() { left <- c.nodes[1].Shutdown(ctx) }()
	time.Sleep(300 * time.Millisecond) // node 2 is leaving, its session's turn in flight
	close(release)
	r := <-done
	if r.err != nil || r.msg.Text() != "answered during the leave" {
		t.Errorf(failed+"the prompt whose turn was in flight as node 2 left: %v, %v; want its answer", r.msg, r.err)
	}
	if err := <-left; err != nil {
		t.Errorf(failed+"node 2 leaves: %v", err)
	}
	msg, err := s.Prompt(ctx, "again")
	if err != nil || msg.Text() != "answered after the leave" {
		t.Fatalf(failed+"prompt after node 2 left: %v, %v", msg, err)
	}
	if h, err := s.History(ctx); err != nil || len(h) != 4 {
		t.Errorf(failed+"history after the leave: %d entries, %v; want 4", len(h), err)
	}
}

// checkHistories reads every session's history from the database: seq
// runs 1, 2, ... with no gap and no duplicate.
func checkHistories(t *testing.T, url string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(failed, err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT session_id, seq FROM musepi_entries ORDER BY session_id, seq")
	if err != nil {
		t.Fatal(failed, err)
	}
	last := map[string]int64{}
	n := 0
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			t.Fatal(failed, err)
		}
		if seq != last[id]+1 {
			t.Errorf(failed+"session %s: seq %d after %d", id, seq, last[id])
		}
		last[id] = seq
		n++
	}
	if rows.Err() != nil {
		t.Fatal(failed, rows.Err())
	}
	t.Logf("%d sessions, %d entries, seq contiguous", len(last), n)
	if len(last) < 88 {
		t.Errorf(failed+"%d sessions in the database; want every session opened", len(last))
	}
}
