package cluster

import (
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/musepi/musepi/cluster/etcdtest"
)

// A member's key holds protoactor's description of it, which protoactor's
// parser reads as before, and its MemberInfo. EtcdMembers reads the keys of
// one cluster with one bounded Get: MusePi's members with their info,
// protoactor's own without, and neither what is no member description nor
// a member leaving. An etcd out of reach fails it within DialTimeout.
func TestEtcdMembers(t *testing.T) {
	ctx := context.Background()
	server := etcdtest.Start(t)
	cfg := EtcdConfig{Endpoints: []string{server.Endpoint()}}
	info := MemberInfo{StoreNode: "node1#0123456789ab", ViewURL: "http://127.0.0.1:9/cluster/members", Client: true}
	ours := etcd.NewNode("id-ours", "127.0.0.1", 7001, []string{CredentialsKind, SessionKind})
	value, err := memberValue(ours, info)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a member's value: %s", value)
	if parsed, err := etcd.NewNodeFromBytes(value); err != nil || parsed.ID != ours.ID || parsed.Port != ours.Port ||
		!slices.Equal(parsed.Kinds, ours.Kinds) {
		t.Fatalf("protoactor reads the value as %+v, %v; want %+v", parsed, err, ours)
	}
	theirs, err := etcd.NewNode("id-theirs", "127.0.0.1", 7002, nil).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	leavingNode := etcd.NewNode("id-leaving", "127.0.0.1", 7003, nil)
	leavingNode.SetAlive(false)
	leaving, err := memberValue(leavingNode, info)
	if err != nil {
		t.Fatal(err)
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for key, v := range map[string]string{
		"/musepi/c1/id-theirs": string(theirs), "/musepi/c1/id-ours": string(value),
		"/musepi/c1/junk": "not json", "/musepi/c1/id-leaving": string(leaving), "/musepi/c2/id-other": string(value),
	} {
		if _, err := client.Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
	}

	got, err := EtcdMembers(ctx, cfg, "c1")
	if err != nil {
		t.Fatal(err)
	}
	want := []EtcdMember{
		{Key: "/musepi/c1/id-ours", ID: "id-ours", Address: "127.0.0.1:7001", Kinds: ours.Kinds, Info: info},
		{Key: "/musepi/c1/id-theirs", ID: "id-theirs", Address: "127.0.0.1:7002"},
	}
	if !slices.EqualFunc(got, want, func(a, b EtcdMember) bool {
		return a.Key == b.Key && a.ID == b.ID && a.Address == b.Address && slices.Equal(a.Kinds, b.Kinds) && a.Info == b.Info
	}) {
		t.Errorf("EtcdMembers(c1) = %+v\nwant %+v", got, want)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0") // a port that accepts and never answers
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for name, endpoint := range map[string]string{"silent": ln.Addr().String(), "closed": "127.0.0.1:1"} {
		start := time.Now()
		_, err := EtcdMembers(ctx, EtcdConfig{Endpoints: []string{"http://" + endpoint}, DialTimeout: 300 * time.Millisecond}, "c1")
		took := time.Since(start)
		if err == nil || took > 3*time.Second {
			t.Errorf("%s etcd: EtcdMembers = %v after %s; want an error within about 300 ms", name, err, took)
		}
		t.Logf("%s etcd: %v after %s", name, err, took.Round(time.Millisecond))
	}
}

// A node no longer sure of its membership knows where it stands once a
// keep-alive that began after its lease could have run out has ended, or
// once etcd is found out of reach; until then Settle waits.
func TestEtcdMembersSettled(t *testing.T) {
	const ttl = 3 * time.Second // sure until the last renewal + 2 s
	for _, tc := range []struct {
		name       string
		renewed    time.Duration // the last renewal's start
		checked    time.Duration // the last ended keep-alive's start
		outOfReach bool
		want       bool
	}{
		{"paused: no keep-alive since the lease could run out", 10 * time.Second, 10 * time.Second, false, false},
		{"a keep-alive began after the lapse and ended", 10 * time.Second, 17 * time.Second, false, true},
		{"one began just at the lapse", 10 * time.Second, 12 * time.Second, false, true},
		{"etcd out of reach: the database decides", 10 * time.Second, 10 * time.Second, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &etcdMembers{cfg: EtcdConfig{TTL: ttl}, ctx: context.Background()}
			p.renewed.Store(int64(tc.renewed))
			p.checked.Store(int64(tc.checked))
			p.outOfReach.Store(tc.outOfReach)
			if got := p.settled(); got != tc.want {
				t.Errorf("settled() = %t, want %t", got, tc.want)
			}
		})
	}
	t.Run("leaving: no keep-alive will come", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		p := &etcdMembers{cfg: EtcdConfig{TTL: ttl}, ctx: ctx}
		p.renewed.Store(int64(10 * time.Second))
		p.checked.Store(int64(10 * time.Second))
		if !p.settled() {
			t.Error("settled() = false for a node whose keep-alives have stopped")
		}
	})
}

// Settle returns at once on a node that is sure or dropped, or whose
// membership has settled, and waits until ctx ends otherwise; a keep-alive
// that ends and settles it ends the wait.
func TestMemberSettle(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sure      bool
		dropped   bool
		settled   bool
		wantWaits bool
	}{
		{"sure", true, false, false, false},
		{"dropped", false, true, false, false},
		{"settled", false, false, true, false},
		{"neither", false, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &Member{born: time.Now(), gone: make(chan struct{})}
			m.sureUntil = func() time.Duration {
				if tc.sure {
					return time.Hour
				}
				return 0
			}
			m.settled = func() bool { return tc.settled }
			never := make(chan struct{})
			m.newsCh = func() <-chan struct{} { return never }
			if tc.dropped {
				close(m.gone)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			m.Settle(ctx)
			if waited := ctx.Err() != nil; waited != tc.wantWaits {
				t.Errorf("Settle waited until its context ended: %t, want %t", waited, tc.wantWaits)
			}
		})
	}
}

func TestMemberSettleWakesOnNews(t *testing.T) {
	m := &Member{born: time.Now(), gone: make(chan struct{})}
	m.sureUntil = func() time.Duration { return 0 }
	var settled atomic.Bool
	m.settled = settled.Load
	news := make(chan struct{})
	m.newsCh = func() <-chan struct{} { return news }
	time.AfterFunc(20*time.Millisecond, func() {
		settled.Store(true)
		close(news)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m.Settle(ctx)
	if ctx.Err() != nil {
		t.Error("Settle waited until its context ended after the news that settled it")
	}
}
