package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/internal/testkit/nodetest"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider/fakellm"
)

// clusterScenario: model m2 answers its first two calls with a 503 and a
// 4 s retry-after (a backoff long enough to kill a node in); key A is
// over its usage limit for an hour; everything else streams the default
// answer in four chunks 250 ms apart (a turn long enough to SIGTERM a node
// during it).
const clusterScenario = `{
  "rules": [
    {"name": "m2: 503, retry in 4 s", "match": {"model": "m2", "first": 2},
     "respond": {"preset": "unavailable", "headers": {"retry-after": "4"}}},
    {"name": "key A: usage limit", "match": {"key": "key-a"},
     "respond": {"preset": "usage_limit", "headers": {"retry-after": "3600"}}}
  ],
  "default": {"text": "Hello from fakellm", "chunks": 4, "chunk_delay_ms": 250}
}`

// TestClusterProcesses is cluster mode end to end, on loopback: etcd,
// PostgreSQL, the fake LLM server, three `musepi node` processes and
// `musepi rpc --cluster` clients. It checks, in order:
//
//   - sessions spread over all three nodes;
//   - a usage-limit 429 for key A seen through a session on node 1 makes
//     the sessions on nodes 2 and 3 use key B without first calling with
//     A, and how long the block took to reach the other nodes;
//   - kill -9 of the node hosting a session mid-backoff (its chain's record
//     in the database): the prompt still completes on another node, and
//     the chain carried on: its auto_retry_end counts every failed attempt
//     in the history, the one before the kill included, and the client
//     sees an auto_retry_start for every failed attempt, 1, 2, ..., the
//     one after the kill numbered n+1 (the new activation keeps a resumed
//     prompt's events until the caller's handle finds it);
//   - SIGTERM of the node hosting a session during a turn: the turn
//     completes and is kept, the session's next prompt runs on another
//     node;
//   - afterwards, every session's history in the database is complete,
//     its seq contiguous, without duplicates.
func TestClusterProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, PostgreSQL, three node processes and rpc clients")
	}
	t.Parallel() // mostly waiting on processes
	bin := buildCommand(t)
	sc, err := fakellm.ParseScenario([]byte(clusterScenario))
	if err != nil {
		t.Fatal(err)
	}
	env := nodetest.Start(t, bin, nodetest.Options{Scenario: sc,
		// A killed node's sessions are free after 2 s in the database; a
		// session that moves waits at most 3 s for its old activation.
		Extra: "lease_ms = 2000\nhandover_timeout_ms = 3000"})
	start := time.Now()
	nodes := []*nodetest.Node{env.StartNode("node1"), env.StartNode("node2"), env.StartNode("node3")}
	if err := env.WaitMembers(3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("3 nodes up and joined in %s", time.Since(start).Round(time.Millisecond))
	db := openDB(t, env.DB)
	prompts := map[string]int{} // prompts sent, by session id

	// Sessions spread over all three nodes: open sessions until each node
	// hosts one (with three members, 30 sessions miss a node with
	// probability 3·(2/3)^30 ≈ 2e-5).
	hosted := map[string][]string{} // session ids by node name
	opener := env.StartClient(nodes[0])
	for i := 0; len(hosted) < 3 && i < 30; i++ {
		id := fmt.Sprintf("n%d", i)
		opener.Call(id, `{"id":"`+id+`","type":"new_session"}`, 20*time.Second)
		state := opener.Call(id+"s", `{"id":"`+id+`s","type":"get_state"}`, 20*time.Second).(map[string]any)
		sid := state["sessionId"].(string)
		owner := db.owner(t, sid)
		hosted[owner] = append(hosted[owner], sid)
	}
	if err := opener.Close(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for n, ids := range hosted {
		counts[n] = len(ids)
	}
	t.Logf("sessions by node: %v", counts)
	if len(hosted) != 3 {
		t.Fatalf("sessions hosted by %v, want all three nodes", slices.Sorted(maps.Keys(hosted)))
	}
	on := func(node string) string { return hosted[node][0] }

	// A 429 through node 1 moves nodes 2 and 3 to key B before they call.
	// (Failures here stop the test: the steps after build on these
	// sessions.)
	c1 := env.StartClient(nodes[0], "--session-id", on("node1"))
	promptOK(t, c1, "1", "hello from node 1")
	prompts[on("node1")]++
	if sw := c1.Events("credential_switch"); len(sw) != 1 || sw[0]["from"] != "key A" || sw[0]["to"] != "key B" {
		t.Fatalf("node 1's session: credential_switch events %v; want one, key A → key B", sw)
	}
	if n := env.LLM.Stats().ByKey[nodetest.KeyA]; n != 1 {
		t.Fatalf("%d calls with key A after node 1's prompt, want 1", n)
	}
	clients := map[string]*nodetest.Client{}
	for _, node := range []string{"node2", "node3"} {
		clients[node] = env.StartClient(nodes[0], "--session-id", on(node))
		promptOK(t, clients[node], "1", "hello from "+node)
		prompts[on(node)]++
	}
	st := env.LLM.Stats()
	if st.ByKey[nodetest.KeyA] != 1 || st.ByKey[nodetest.KeyB] != 3 {
		t.Errorf("calls by key %v: want key A once (node 1's 429), key B three times", st.ByKey)
	}
	// The credentials activation lives on one node; the two others
	// received the block.
	var lags []string
	for _, n := range nodes {
		if line := n.Output().Last("block propagation to this node"); line != "" {
			lags = append(lags, n.Name+": "+line[strings.Index(line, "propagation"):])
		}
	}
	t.Logf("block propagation (publish → applied on the node): %s", strings.Join(lags, "; "))
	if len(lags) < 2 {
		t.Errorf("block propagation reported by %d nodes, want the two that do not host the credentials activation", len(lags))
	}

	// kill -9 of the node hosting a session mid-backoff.
	t.Run("kill -9 mid-backoff", func(t *testing.T) {
		victim := clients["node2"]
		victim.Call("m", `{"id":"m","type":"set_model","provider":"fake","modelId":"m2"}`, 20*time.Second)
		victim.Send(`{"id":"2","type":"prompt","message":"survive a crash"}`)
		prompts[on("node2")]++
		first, err := victim.NextEvent("auto_retry_start", 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Mid-backoff: once the chain's record (attempt, due time) is in
		// the database. A kill before that is a crash before the backoff
		// began, which the prompt does not survive (ErrHostLeft).
		if err := db.waitRecord(on("node2"), 3*time.Second); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		nodes[1].Kill()
		settled, err := victim.NextEvent("agent_settled", 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if settled["success"] != true {
			t.Fatalf("the prompt of the session on the killed node settled %v, want success", settled)
		}
		// The chain carried on: its end counts every failed attempt of the
		// prompt, the one before the kill included (a new chain would
		// count from 1), and what the client saw of its starts goes n,
		// n+1, ...
		entries := db.entries(t, on("node2"))
		failed := 0
		for _, e := range entries {
			switch {
			case e.GetUser() != nil:
				failed = 0
			case e.GetAssistant().GetStopReason() == messages.StopReason_STOP_REASON_ERROR:
				failed++
			}
		}
		ends := victim.Events("auto_retry_end")
		var attempts []any
		for _, ev := range victim.Events("auto_retry_start") {
			attempts = append(attempts, ev["attempt"])
		}
		if first["attempt"] != 1.0 || failed < 2 || len(ends) == 0 || ends[len(ends)-1]["attempt"] != float64(failed) {
			t.Errorf("auto_retry_start before the kill %v, %d failed attempts in the history, auto_retry_end %v: want the chain carried on (its end counting all %d)",
				first["attempt"], failed, ends, failed)
		}
		for i, a := range attempts {
			if a != float64(i+1) {
				t.Errorf("auto_retry_start attempts %v seen by the client: want 1, 2, ... (n+1 after n)", attempts)
				break
			}
		}
		if len(attempts) != failed {
			t.Errorf("auto_retry_start attempts %v seen by the client for %d failed attempts: want one per failed attempt, the one after the kill included", attempts, failed)
		}
		owner := db.owner(t, on("node2"))
		t.Logf("kill -9 mid-backoff: the prompt settled %s after the kill, on %s; %d failed attempts in the history, auto_retry_end attempt %v; auto_retry_start seen by the client: %v",
			time.Since(killed).Round(time.Millisecond), owner, failed, ends[len(ends)-1]["attempt"], attempts)
		if owner == "node2" {
			t.Errorf("the session is still owned by the killed node")
		}
	})
	if nodes[1].Running() {
		t.Fatal("node2 was not killed")
	}

	// SIGTERM of the node hosting a session during a turn: the turn ends
	// and is kept; the next prompt runs elsewhere.
	t.Run("SIGTERM during a turn", func(t *testing.T) {
		leaver := clients["node3"]
		leaver.Send(`{"id":"3","type":"prompt","message":"finish before you go"}`)
		prompts[on("node3")]++
		if _, err := leaver.NextEvent("message_update", 20*time.Second); err != nil {
			t.Fatal(err)
		}
		took, err := nodes[2].Term(40 * time.Second)
		if err != nil {
			t.Fatalf("node3: %v", err)
		}
		if settled, err := leaver.NextEvent("agent_settled", 30*time.Second); err != nil || settled["success"] != true {
			t.Fatalf("the turn in flight during node3's SIGTERM settled %v, %v; want success", settled, err)
		}
		t.Logf("node3 left in %s after SIGTERM during a turn", took.Round(time.Millisecond))
		promptOK(t, leaver, "4", "and after")
		prompts[on("node3")]++
		if owner := db.owner(t, on("node3")); owner != "node1" {
			t.Errorf("after node3 left, the session is owned by %s, want node1 (the only node left)", owner)
		}
	})

	for _, c := range append([]*nodetest.Client{c1}, clients["node2"], clients["node3"]) {
		if err := c.Close(15 * time.Second); err != nil {
			t.Error(err)
		}
	}
	if _, err := nodes[0].Term(40 * time.Second); err != nil {
		t.Errorf("node1: %v", err)
	}
	t.Run("histories", func(t *testing.T) { db.checkHistories(t, prompts) })
}

// promptOK sends a prompt with id and waits until it settles with success.
func promptOK(t *testing.T, c *nodetest.Client, id, text string) {
	t.Helper()
	c.Call(id, fmt.Sprintf(`{"id":%q,"type":"prompt","message":%q}`, id, text), 30*time.Second)
	settled, err := c.NextEvent("agent_settled", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if settled["success"] != true {
		t.Fatalf("prompt %q settled %v", text, settled)
	}
}

// clusterDB is connections to the cluster's database, safe for use by
// several goroutines.
type clusterDB struct{ conn *pgxpool.Pool }

func openDB(t *testing.T, url string) *clusterDB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return &clusterDB{conn}
}

// waitRecord waits until session has a retry chain's record with a due
// time in the database.
func (db *clusterDB) waitRecord(session string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		var n int
		err := db.conn.QueryRow(ctx, "SELECT count(*) FROM musepi_records WHERE session_id = $1 AND due_at IS NOT NULL", session).Scan(&n)
		switch {
		case err != nil:
			return fmt.Errorf("no record of session %s's backoff in the database: %w", session, err)
		case n > 0:
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (db *clusterDB) entries(t *testing.T, session string) []*messages.Entry {
	rows, err := db.conn.Query(context.Background(), "SELECT entry FROM musepi_entries WHERE session_id = $1 ORDER BY seq", session)
	if err != nil {
		t.Fatal(err)
	}
	var out []*messages.Entry
	var b []byte
	_, err = pgx.ForEachRow(rows, []any{&b}, func() error {
		e := &messages.Entry{}
		out = append(out, e)
		return proto.Unmarshal(b, e)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// owner is the node name (without its incarnation) that took the
// session's current epoch.
func (db *clusterDB) owner(t *testing.T, session string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var owner string
	if err := db.conn.QueryRow(ctx, "SELECT owner FROM musepi_sessions WHERE session_id = $1", session).Scan(&owner); err != nil {
		t.Fatalf("owner of session %s: %v", session, err)
	}
	name, _, _ := strings.Cut(owner, "#")
	return name
}

// checkHistories checks every session's history in the database: seq 1,
// 2, 3... without gaps or duplicates, and for each session prompted n
// times, n user messages, each answered, the last entry a successful
// answer.
func (db *clusterDB) checkHistories(t *testing.T, prompts map[string]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.conn.Query(ctx, "SELECT session_id, seq, entry FROM musepi_entries ORDER BY session_id, seq")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		session string
		seq     uint64
		entry   []byte
	}
	var all []row
	var r row
	if _, err := pgx.ForEachRow(rows, []any{&r.session, &r.seq, &r.entry}, func() error {
		all = append(all, row{r.session, r.seq, slices.Clone(r.entry)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bySession := map[string][]*messages.Entry{}
	for _, r := range all {
		e := &messages.Entry{}
		if err := proto.Unmarshal(r.entry, e); err != nil {
			t.Fatalf("session %s seq %d: %v", r.session, r.seq, err)
		}
		if e.GetSeq() != r.seq {
			t.Errorf("session %s: row seq %d holds entry seq %d", r.session, r.seq, e.GetSeq())
		}
		if want := uint64(len(bySession[r.session]) + 1); r.seq != want {
			t.Errorf("session %s: seq %d where %d was due (a gap or a duplicate)", r.session, r.seq, want)
		}
		bySession[r.session] = append(bySession[r.session], e)
	}
	for id, n := range prompts {
		entries := bySession[id]
		users := 0
		for _, e := range entries {
			if e.GetUser() != nil {
				users++
			}
		}
		last := entries[len(entries)-1].GetAssistant()
		if users != n || last == nil || last.GetStopReason() != messages.StopReason_STOP_REASON_STOP {
			t.Errorf("session %s: %d entries, %d user messages for %d prompts, last %v; want every prompt answered",
				id, len(entries), users, n, entries[len(entries)-1])
		}
	}
	t.Logf("histories: %d sessions, %d entries, seq contiguous", len(bySession), len(all))
}
