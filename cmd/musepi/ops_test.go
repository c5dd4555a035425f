package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/cmd/musepi/internal/opsview"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/internal/testkit/nodetest"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider/fakellm"
)

// opsRecover: model m2 answers its first call with a 503 and a 1 s
// retry-after (a session that backs off once, then is answered).
// opsWait: m2 answers every call with a 503 and a 25 s retry-after (a
// session left in its backoff while the commands run; under the 30 s after
// which a session passivates).
const (
	opsRecover = `{"rules": [{"name": "m2: 503 once, retry in 1 s", "match": {"model": "m2", "first": 1},
		"respond": {"preset": "unavailable", "headers": {"retry-after": "1"}}}]}`
	opsWait = `{"rules": [{"name": "m2: 503, retry in 25 s", "match": {"model": "m2"},
		"respond": {"preset": "unavailable", "headers": {"retry-after": "25"}}}]}`
)

// TestOperatorView runs the operator's commands against a cluster of
// three `musepi node` processes (etcd, PostgreSQL, fakellm) with three
// sessions: one answered at once (no record), one answered after a
// backoff (its record cleared: idle), one left in its backoff (sleeping,
// attempt 1, due in about 25 s). The commands run without the providers'
// keys in their environment, and change nothing: the sessions' epochs,
// owners and records, and the nodes registered, are the same before and
// after.
//
//   - musepi sessions: every session with its owner and epoch as the
//     database has them, its hold, phase, attempt and due time, as a table
//     and as JSON;
//   - musepi history show: a session's entries decoded from the database
//     as text lines, and with --json a history file that "musepi history
//     check" finds whole and a file store opens with the same entries; an
//     unknown session is a failure;
//   - musepi cluster status: the members as etcd has them (the three nodes
//     and the rpc client), node1's and node2's views agreeing with etcd,
//     node3's not read (it serves none), each member's live lease, the
//     sessions each incarnation holds; after kill -9 of node3, its
//     incarnation's lease expired and no longer a member.
func TestOperatorView(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, PostgreSQL, three node processes and an rpc client")
	}
	t.Parallel() // mostly waiting on processes
	bin := buildCommand(t)
	// A killed node's lease runs out after 2 s.
	env := nodetest.Start(t, bin, nodetest.Options{Scenario: scenario(t, opsRecover), Extra: "lease_ms = 2000"})
	// node3 serves no view: it runs without --metrics-addr.
	nodes := []*nodetest.Node{env.StartNode("node1", "--metrics-addr", "127.0.0.1:0"),
		env.StartNode("node2", "--metrics-addr", "127.0.0.1:0"), env.StartNode("node3")}
	if err := env.WaitMembers(3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, env.DB)
	c := env.StartClient(nodes[0], "--session-id", "ops-plain")
	promptOK(t, c, "1", "hello")
	c.Call("2", `{"id":"2","type":"switch_session","sessionPath":"ops-recovered"}`, 20*time.Second)
	c.Call("3", `{"id":"3","type":"set_model","provider":"fake","modelId":"m2"}`, 20*time.Second)
	promptOK(t, c, "4", "recover")
	env.LLM.SetScenario(scenario(t, opsWait))
	c.Call("5", `{"id":"5","type":"switch_session","sessionPath":"ops-waiting"}`, 20*time.Second)
	c.Call("6", `{"id":"6","type":"set_model","provider":"fake","modelId":"m2"}`, 20*time.Second)
	c.Send(`{"id":"7","type":"prompt","message":"wait"}`)
	if _, err := c.NextEvent("auto_retry_start", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := db.waitRecord("ops-waiting", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	before, registered := db.state(t), etcdMembers(t, env)
	ops := func(t *testing.T, command string, args ...string) string {
		t.Helper()
		return runOps(t, bin, nodes[0].Config, command, args...)
	}

	t.Run("sessions", func(t *testing.T) {
		var got []opsview.Session
		if err := json.Unmarshal([]byte(ops(t, "sessions", "--json")), &got); err != nil {
			t.Fatal(err)
		}
		want := map[string]struct {
			hold, phase string
			attempt     int
			waits       bool
		}{
			"ops-plain":     {opsview.Released, "no record", 0, false},
			"ops-recovered": {opsview.Released, "idle", 0, false},
			"ops-waiting":   {opsview.Held, "backoff: sleeping", 1, true},
		}
		if len(got) != len(want) {
			t.Fatalf("%d sessions listed, want %d: %+v", len(got), len(want), got)
		}
		for _, s := range got {
			w := want[s.ID]
			epoch, owner := db.epochOwner(t, s.ID)
			if s.Epoch != epoch || s.Owner != owner || s.Hold != w.hold || s.Phase != w.phase || s.Attempt != w.attempt ||
				(s.Due != nil) != w.waits || s.Entries == 0 {
				t.Errorf("session %+v; want epoch %d, owner %s (the database's), %+v", s, epoch, owner, w)
			}
			if s.Due != nil {
				if in := time.Until(*s.Due); in <= 0 || in > 25*time.Second {
					t.Errorf("session %s due in %s, want within the 25 s of its retry-after", s.ID, in)
				}
			}
		}
		rows := tableRows(ops(t, "sessions"))
		if len(rows) != len(got)+1 || strings.Join(rows[0], ",") != "SESSION,OWNER,EPOCH,HOLD,PHASE,ATTEMPT,DUE,ENTRIES" {
			t.Fatalf("table rows %q: want the header and %d sessions", rows, len(got))
		}
		for i, s := range got {
			row := rows[i+1]
			due := row[6]
			if want := []string{s.ID, s.Owner, fmt.Sprint(s.Epoch), s.Hold, s.Phase}; strings.Join(row[:5], ",") != strings.Join(want, ",") ||
				(s.Due != nil) != strings.Contains(due, " (in ") {
				t.Errorf("table row %q; want %q and a due time to come if JSON has one (%v)", row, want, s.Due)
			}
		}
	})

	t.Run("history show", func(t *testing.T) {
		entries := db.entries(t, "ops-recovered") // decoded here from the rows
		var want strings.Builder
		if err := opsview.WriteHistory(&want, entries); err != nil {
			t.Fatal(err)
		}
		table := ops(t, "history show", "ops-recovered")
		if table != want.String() {
			t.Errorf("history show printed\n%s\nwant\n%s", table, want.String())
		}
		var kinds []string
		for _, row := range tableRows(table)[1:] {
			kinds = append(kinds, row[2])
		}
		if got := strings.Join(kinds, " "); got != "model user assistant assistant" || !strings.Contains(table, "fake/m2 error (HTTP 503)") {
			t.Errorf("entry kinds %q, want the model change, the prompt, the 503 and the answer", got)
		}

		// --json is a history file: "musepi history check" finds it whole,
		// and a file store opens it with the database's entries.
		dir := t.TempDir()
		path := filepath.Join(dir, "ops-recovered.jsonl")
		if err := os.WriteFile(path, []byte(ops(t, "history show", "--json", "ops-recovered")), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, errOut := runToEnd(t, bin, "history", "check", path); code != 0 {
			t.Errorf("history check of the --json output: exit %d\n%s", code, errOut)
		}
		fs, err := history.OpenFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer fs.Close()
		log, opened, err := fs.Open("ops-recovered")
		if err != nil {
			t.Fatal(err)
		}
		defer log.Close()
		if !slices.EqualFunc(opened, entries, func(a, b *messages.Entry) bool { return proto.Equal(a, b) }) {
			t.Errorf("the --json output opens as %v, want the database's %v", opened, entries)
		}

		code, out, errOut := runOutput(t, bin, "history", "show", "--config", nodes[0].Config, "nope")
		if want := "musepi history show: database: pgstore: inspect: session nope: no such session in the database\n"; code != 1 || out != "" || errOut != want {
			t.Errorf("history show of an unknown session: exit %d, stdout %q, stderr %q; want 1 and %q", code, out, errOut, want)
		}
	})

	t.Run("cluster status", func(t *testing.T) {
		var st opsview.Status
		if err := json.Unmarshal([]byte(ops(t, "cluster status", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		// etcd has the three nodes and the rpc client (a member that hosts
		// nothing); node1 and node2 see what etcd has; node3 serves no view.
		var addrs []string
		for _, m := range st.Members {
			addrs = append(addrs, m.Address)
		}
		if len(registered) != 4 || strings.Join(addrs, " ") != strings.Join(registered, " ") {
			t.Fatalf("members %v, want etcd's four %v", addrs, registered)
		}
		leases := map[string]opsview.Lease{}
		for _, l := range st.Leases {
			leases[l.Node] = l
		}
		for _, m := range st.Members {
			name, _, _ := strings.Cut(m.StoreNode, "#")
			switch {
			case m.Client:
				if name != "node1-rpc" || m.ViewError != "a client serves no view" {
					t.Errorf("client member %+v: want the rpc client of node1's file, serving no view", m)
				}
			case name == "node3":
				if m.Address != nodes[2].Addr || m.Sees != nil || !strings.Contains(m.ViewError, "without --metrics-addr") {
					t.Errorf("node3 %+v: want its view not read, as it serves none", m)
				}
			case name == "node1" || name == "node2":
				node := nodes[map[string]int{"node1": 0, "node2": 1}[name]]
				if m.Address != node.Addr || strings.Join(m.Sees, " ") != strings.Join(registered, " ") || m.Missing != nil || m.Extra != nil {
					t.Errorf("%s %+v: want it at %s, seeing etcd's members", name, m, node.Addr)
				}
			default:
				t.Errorf("member %+v: no node of this test", m)
			}
			if l := leases[m.StoreNode]; !l.Live || l.Member != m.Address {
				t.Errorf("member %s (%s): lease %+v; want a live lease naming the member", m.Address, m.StoreNode, l)
			}
		}
		if !st.Agree || st.Unread != 1 || st.MembersError != "" || st.DatabaseError != "" {
			t.Errorf("agree %t, unread %d, errors %q %q; want agreement, node3's view unread, no error",
				st.Agree, st.Unread, st.MembersError, st.DatabaseError)
		}
		_, owner := db.epochOwner(t, "ops-waiting")
		if !slices.Contains(leases[owner].Sessions, "ops-waiting") {
			t.Errorf("the lease of %s holds %v, want ops-waiting among them", owner, leases[owner].Sessions)
		}
		text := ops(t, "cluster status")
		if strings.Count(text, " agrees\n") != 2 || !strings.Contains(text, "the views read agree with etcd (2 of 3 nodes' views read)") {
			t.Errorf("the text does not show node1's and node2's views agreeing:\n%s", text)
		}
	})

	if after := db.state(t); after != before {
		t.Errorf("the commands changed the database:\nbefore %s\nafter  %s", before, after)
	}
	if after := etcdMembers(t, env); strings.Join(after, " ") != strings.Join(registered, " ") {
		t.Errorf("etcd's members went from %v to %v", registered, after)
	}

	// kill -9 of node3: etcd drops its key, its lease runs out, and the
	// status shows its incarnation expired, holding what it held.
	t.Run("a node killed", func(t *testing.T) {
		_, held := db.epochOwner(t, "ops-waiting")
		nodes[2].Kill()
		if err := env.WaitMembers(3, 15*time.Second); err != nil { // two nodes and the client
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // its database lease
		var st opsview.Status
		if err := json.Unmarshal([]byte(ops(t, "cluster status", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Members) != 3 || !st.Agree || st.Unread != 0 {
			t.Errorf("%d members, agree %t, unread %d; want node1, node2 and the client, agreeing", len(st.Members), st.Agree, st.Unread)
		}
		var dead *opsview.Lease
		for i, l := range st.Leases {
			if strings.HasPrefix(l.Node, "node3#") {
				dead = &st.Leases[i]
			}
		}
		switch {
		case dead == nil || dead.Live || dead.Member != "" || dead.LeaseUntil == nil || !dead.LeaseUntil.Before(*st.DatabaseNow):
			t.Errorf("node3's lease %+v; want it expired, no member", dead)
		case strings.HasPrefix(held, "node3#") != slices.Contains(dead.Sessions, "ops-waiting"):
			t.Errorf("node3's expired lease holds %v; ops-waiting is held by %s", dead.Sessions, held)
		}
		ops(t, "cluster status")
		ops(t, "sessions")
	})
	c.Call("9", `{"id":"9","type":"abort_retry"}`, 20*time.Second) // the client's Close waits for its prompt
	if _, err := c.NextEvent("agent_settled", 20*time.Second); err != nil {
		t.Error(err)
	}
}

// TestOperatorViewTLS runs the operator's commands against a cluster with
// mutual TLS (issue 36: they panicked loading a node's file with
// [cluster.tls]): etcd serves https and wants a client certificate of the
// cluster CA, two `musepi node` processes serve their views on
// --metrics-addr (plain HTTP, as without TLS), and a `musepi rpc
// --cluster` client with node1's file has a prompt answered. Given node1's
// own file, TLS tables and all, and no provider key in their environment,
// each command exits 0:
//
//   - musepi cluster status: etcd's members (the two nodes and the
//     client), read over TLS with the file's [cluster.etcd.tls]
//     certificate; both nodes' views read and agreeing with etcd; each
//     member's live lease;
//   - musepi sessions: the session, its owner and epoch the database's;
//   - musepi history show: the session's entries, the prompt and the
//     answer, decoded.
func TestOperatorViewTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, PostgreSQL, two node processes and an rpc client")
	}
	t.Parallel() // mostly waiting on processes
	bin := buildCommand(t)
	env := nodetest.Start(t, bin, nodetest.Options{TLS: true})
	nodes := []*nodetest.Node{env.StartNode("node1", "--metrics-addr", "127.0.0.1:0"),
		env.StartNode("node2", "--metrics-addr", "127.0.0.1:0")}
	if err := env.WaitMembers(2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	const session = "ops-tls"
	promptOK(t, env.StartClient(nodes[0], "--session-id", session), "1", "hello over TLS")
	if err := env.WaitMembers(3, 20*time.Second); err != nil { // the two nodes and the client
		t.Fatal(err)
	}
	db := openDB(t, env.DB)
	file := nodes[0].Config

	t.Run("cluster status", func(t *testing.T) {
		var st opsview.Status
		if err := json.Unmarshal([]byte(runOps(t, bin, file, "cluster status", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		checkStatusTLS(t, st, nodes)
		if text := runOps(t, bin, file, "cluster status"); !strings.Contains(text, "the views read agree with etcd (2 of 2 nodes' views read)") {
			t.Errorf("the text does not show both nodes' views agreeing:\n%s", text)
		}
	})

	t.Run("sessions", func(t *testing.T) {
		var got []opsview.Session
		if err := json.Unmarshal([]byte(runOps(t, bin, file, "sessions", "--json")), &got); err != nil {
			t.Fatal(err)
		}
		epoch, owner := db.epochOwner(t, session)
		if len(got) != 1 || got[0].ID != session || got[0].Owner != owner || got[0].Epoch != epoch || got[0].Entries != 2 {
			t.Errorf("sessions %+v; want %s alone, owner %s, epoch %d (the database's), 2 entries", got, session, owner, epoch)
		}
		if rows := tableRows(runOps(t, bin, file, "sessions")); len(rows) != 2 || rows[1][0] != session || rows[1][1] != owner {
			t.Errorf("table rows %q; want the header and %s, owned by %s", rows, session, owner)
		}
	})

	t.Run("history show", func(t *testing.T) {
		var want strings.Builder
		if err := opsview.WriteHistory(&want, db.entries(t, session)); err != nil {
			t.Fatal(err)
		}
		table := runOps(t, bin, file, "history show", session)
		if table != want.String() || !strings.Contains(table, `"hello over TLS"`) || !strings.Contains(table, fakellm.DefaultText) {
			t.Errorf("history show printed\n%s\nwant\n%s(the prompt and the fake LLM's answer)", table, want.String())
		}
	})
}

// checkStatusTLS checks cluster status's JSON of TestOperatorViewTLS:
// three members in etcd, node1 and node2 at their addresses and the rpc
// client of node1's file; each node's view read over plain HTTP and
// agreeing; a live lease naming each member; no error.
func checkStatusTLS(t *testing.T, st opsview.Status, nodes []*nodetest.Node) {
	t.Helper()
	if len(st.Members) != 3 || !st.Agree || st.Unread != 0 || st.MembersError != "" || st.DatabaseError != "" {
		t.Fatalf("status %+v; want three members, both nodes' views read and agreeing, no error", st)
	}
	var etcd []string
	for _, m := range st.Members {
		etcd = append(etcd, m.Address)
	}
	leases := map[string]opsview.Lease{}
	for _, l := range st.Leases {
		leases[l.Node] = l
	}
	for _, m := range st.Members {
		name, _, _ := strings.Cut(m.StoreNode, "#")
		i := slices.IndexFunc(nodes, func(n *nodetest.Node) bool { return n.Name == name })
		switch {
		case m.Client:
			if name != "node1-rpc" || m.ViewError != "a client serves no view" {
				t.Errorf("client member %+v: want the rpc client of node1's file, serving no view", m)
			}
		case i < 0:
			t.Errorf("member %+v: no node of this test", m)
		case m.Address != nodes[i].Addr || !strings.HasPrefix(m.ViewURL, "http://127.0.0.1:") ||
			strings.Join(m.Sees, " ") != strings.Join(etcd, " ") || m.Missing != nil || m.Extra != nil:
			t.Errorf("%s %+v: want it at %s, its view on http://127.0.0.1, seeing etcd's members %v", name, m, nodes[i].Addr, etcd)
		}
		if l := leases[m.StoreNode]; !l.Live || l.Member != m.Address {
			t.Errorf("member %s (%s): lease %+v; want a live lease naming the member", m.Address, m.StoreNode, l)
		}
	}
}

// runOps runs the operator's command (its words, "history show") with
// --config file and args, fails t unless it exits 0 with nothing on
// stderr, and returns its stdout.
func runOps(t *testing.T, bin, file, command string, args ...string) string {
	t.Helper()
	args = append(append(strings.Fields(command), "--config", file), args...)
	code, out, errOut := runOutput(t, bin, args...)
	if code != 0 || errOut != "" {
		t.Fatalf("musepi %s: exit %d, stderr:\n%s", strings.Join(args, " "), code, errOut)
	}
	t.Logf("musepi %s:\n%s", strings.Join(args, " "), out)
	return out
}

// tableRows are a table's lines split into cells (two spaces or more
// apart).
func tableRows(table string) [][]string {
	var rows [][]string
	for line := range strings.Lines(table) {
		rows = append(rows, cellGap.Split(strings.TrimSpace(line), -1))
	}
	return rows
}

var cellGap = regexp.MustCompile(`\s{2,}`)

// scenario parses a fakellm scenario.
func scenario(t *testing.T, src string) *fakellm.Scenario {
	t.Helper()
	sc, err := fakellm.ParseScenario([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// epochOwner is a session's epoch and owner (name#incarnation).
func (db *clusterDB) epochOwner(t *testing.T, session string) (int64, string) {
	t.Helper()
	var epoch int64
	var owner string
	if err := db.conn.QueryRow(context.Background(), "SELECT epoch, owner FROM musepi_sessions WHERE session_id = $1",
		session).Scan(&epoch, &owner); err != nil {
		t.Fatalf("session %s: %v", session, err)
	}
	return epoch, owner
}

// state is what a command that reads only must leave as it was: the
// sessions' rows (epoch, owner, held), their records and claims, and the
// names of the node incarnations registered (not their leases, which
// their heartbeats move).
func (db *clusterDB) state(t *testing.T) string {
	t.Helper()
	var out string
	if err := db.conn.QueryRow(context.Background(), `SELECT
		(SELECT coalesce(string_agg(node, ' ' ORDER BY node), '') FROM musepi_nodes) || ' | ' ||
		(SELECT coalesce(string_agg(s::text, ' ' ORDER BY session_id), '') FROM musepi_sessions s) || ' | ' ||
		(SELECT coalesce(string_agg(r::text, ' ' ORDER BY session_id), '') FROM musepi_records r)`).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// etcdMembers are the members registered in etcd, failing the test if
// etcd cannot be read.
func etcdMembers(t *testing.T, env *nodetest.Env) []string {
	t.Helper()
	addrs, err := env.Registered()
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}
