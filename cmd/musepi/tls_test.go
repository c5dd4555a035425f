package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/musepi/musepi/internal/testkit/nodetest"
	"github.com/musepi/musepi/internal/testkit/testcert"
)

// TestClusterTLS is the cluster with mutual TLS, on loopback: etcd serves
// https and wants client certificates of the cluster CA, and every member
// presents a certificate of that CA. It checks, in order:
//
//   - node1 (on 127.0.0.1) and node2 (on 0.0.0.0, advertising 127.0.0.1)
//     join, and a `musepi rpc --cluster` client with node1's file has a
//     prompt answered by a session on each node;
//   - protoactor's connect handshake on node2's gRPC port succeeds with a
//     certificate of the CA, and fails without one, with one of another
//     CA, and in plaintext;
//   - a client without [cluster.tls], and one whose certificate another CA
//     signed (both with etcd's certificates, so they reach the remote)
//     cannot open a session: exit 1, and no node opened it (no row in the
//     database);
//   - meanwhile a node whose certificates another CA signed never joins:
//     it never listens, and no node lists its address;
//   - a node on 0.0.0.0 without TLS refuses to start: exit 1, with the
//     line that says why and what to do.
func TestClusterTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, PostgreSQL, node processes and rpc clients")
	}
	t.Parallel() // mostly waiting on processes
	bin := buildCommand(t)
	env := nodetest.Start(t, bin, nodetest.Options{TLS: true})
	n1 := env.StartNode("node1")
	m2 := env.Member("node2")
	m2.Host = "0.0.0.0"
	n2 := env.StartNodeAs("node2", m2)
	if want := fmt.Sprintf("127.0.0.1:%d", n2.Port); n2.Addr != want {
		t.Errorf("node2 on 0.0.0.0 listens on %s, want its advertised %s", n2.Addr, want)
	}
	for _, n := range []*nodetest.Node{n1, n2} {
		if line, _ := n.WaitLine("listening on ", 0); !strings.HasSuffix(line, "etcd membership, mutual TLS)") {
			t.Errorf("%s: %q, want it to say mutual TLS", n.Name, line)
		}
	}
	if err := env.WaitMembers(2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, env.DB)

	// A prompt answered by a session on each node, through node1's file.
	opener := env.StartClient(n1)
	on := map[string]string{} // a session id by the node hosting it
	for i := 0; len(on) < 2 && i < 20; i++ {
		id := fmt.Sprintf("s%d", i)
		opener.Call(id, `{"id":"`+id+`","type":"new_session"}`, 20*time.Second)
		state := opener.Call(id+"s", `{"id":"`+id+`s","type":"get_state"}`, 20*time.Second).(map[string]any)
		sid := state["sessionId"].(string)
		on[db.owner(t, sid)] = sid
	}
	if err := opener.Close(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	if len(on) != 2 {
		t.Fatalf("sessions hosted by %v only, want both nodes", on)
	}
	for node, sid := range on {
		promptOK(t, env.StartClient(n1, "--session-id", sid), "1", "hello "+node)
	}

	// protoactor's connect handshake on node2's port.
	member := env.CA.Config(t, testcert.Cert{Name: "probe"})
	noCert := member.Clone()
	noCert.Certificates = nil
	other := testcert.NewCA(t, "other CA")
	foreign := member.Clone()
	intruder := other.Config(t, testcert.Cert{Name: "intruder"}).Certificates[0]
	foreign.Certificates = nil
	// Sent whatever CAs node2 names (Go's client would send none).
	foreign.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &intruder, nil }
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		ok    bool
	}{
		{"a certificate of the CA", credentials.NewTLS(member), true},
		{"no certificate", credentials.NewTLS(noCert), false},
		{"a certificate of another CA", credentials.NewTLS(foreign), false},
		{"plaintext", insecure.NewCredentials(), false},
	} {
		err := connect(n2.Addr, tc.creds)
		if tc.ok != (err == nil) {
			t.Errorf("connect to node2 with %s: %v; want success: %v", tc.name, err, tc.ok)
		}
		t.Logf("connect with %s: %v", tc.name, err)
	}

	// Members without a certificate of the CA: two clients with etcd's
	// certificates (so that they get as far as the remote), and a node
	// without them.
	etcdOnly := env.Member("plain")
	etcdOnly.TLS = nil
	rogue := other.Issue(t, testcert.Cert{Name: "rogue"})
	foreignCluster := env.Member("foreign")
	foreignCluster.TLS = &rogue
	// They give up after 2×(1 s + 1 s + 1 s) + 5 s, not the defaults'
	// 2×(10 s + 15 s + 1 s) + 5 s (cluster's openWait).
	for _, m := range []*nodetest.Member{&etcdOnly, &foreignCluster} {
		m.HandoverTimeout, m.Lease = time.Second, time.Second
	}
	mallory := env.Launch("mallory", nodetest.Member{TLS: &rogue, EtcdTLS: &rogue})
	var wg sync.WaitGroup
	for _, c := range []struct {
		name string
		m    nodetest.Member
	}{{"plaintext", etcdOnly}, {"foreign", foreignCluster}} {
		wg.Go(func() {
			start := time.Now()
			id := "tls-" + c.name
			code, out := env.Run(90*time.Second, "rpc", "--cluster", "--config", env.WriteConfig(c.name, 0, c.m), "--session-id", id)
			if code != 1 || !strings.Contains(out, "musepi rpc: rpc: start session: musepi: open session "+id+" in the cluster: ") {
				t.Errorf("%s client: exit %d; want 1 and no session opened. Output:\n%s", c.name, code, out)
			}
			if db.sessions(t, id) != 0 {
				t.Errorf("%s client: session %s opened on a node", c.name, id)
			}
			t.Logf("%s client: exit %d after %s", c.name, code, time.Since(start).Round(time.Millisecond))
		})
	}
	wg.Wait()
	addr := fmt.Sprintf("127.0.0.1:%d", mallory.Port)
	if out := mallory.Output().String(); strings.Contains(out, "listening on") {
		t.Errorf("mallory, with certificates of another CA, started:\n%s", out)
	}
	for _, n := range []*nodetest.Node{n1, n2} {
		if strings.Contains(n.Output().String(), addr) {
			t.Errorf("%s saw mallory (%s):\n%s", n.Name, addr, n.Output())
		}
	}
	mallory.Kill()

	// Every interface without TLS: refused, saying why and how to fix it.
	open := env.Member("open")
	open.Host, open.TLS = "0.0.0.0", nil
	code, out := env.Run(30*time.Second, "node", "--config", env.WriteConfig("open", 7001, open))
	want := `open.toml: cluster.tls: required with host = "0.0.0.0", which is not a loopback address: without TLS anyone who can reach the port can send this node's actors messages. ` +
		"Add a [cluster.tls] table with ca_file, cert_file and key_file (docs/cluster.md#mutual-tls), or set insecure = true in [cluster] on a network where every host is trusted"
	if code != 1 || !strings.HasSuffix(out, want) {
		t.Errorf("node on 0.0.0.0 without TLS: exit %d, output\n%s\nwant exit 1 and the line\n%s", code, out, want)
	}
}

// connect opens protoactor's remote stream to addr with creds and sends
// the connect request a member's endpoint writer sends first; it returns
// nil once the node has answered it.
func connect(addr string, creds credentials.TransportCredentials) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		return err
	}
	err = stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "probe", Address: "127.0.0.1:1"}},
	}}})
	if err != nil {
		return err
	}
	msg, err := stream.Recv()
	if err != nil {
		return err
	}
	if msg.GetConnectResponse() == nil {
		return fmt.Errorf("answered %v, not a connect response", msg)
	}
	return stream.CloseSend()
}

// sessions is how many rows musepi_sessions has for session: 1 once a
// node opened it.
func (db *clusterDB) sessions(t *testing.T, session string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := db.conn.QueryRow(ctx, "SELECT count(*) FROM musepi_sessions WHERE session_id = $1", session).Scan(&n); err != nil {
		t.Fatalf("sessions %s: %v", session, err)
	}
	return n
}
