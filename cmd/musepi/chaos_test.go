package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/musepi/musepi/internal/testkit/nodetest"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider/fakellm"
)

// chaosPlan sizes a chaos run: chaosFull, or chaosShort with -short.
type chaosPlan struct {
	sessions int           // each sends one prompt, all at the start
	run      time.Duration // faults are injected this long
	every    time.Duration // one node fault this often
	pause    time.Duration // how long a paused node stays stopped
	outage   time.Duration // the provider answers 503 this long from the start
	pgAt     time.Duration // when PostgreSQL restarts (pg_ctl restart -m fast)
	etcdAt   time.Duration // when etcd stops
	etcdDown time.Duration // for this long
	// retries is the sessions' max_retries (0: the default, 10, whose
	// backoffs add up to about 32 s with base_delay_ms 100, the 8 s cap
	// and 75-100 % jitter; 20 add up to about 100 s).
	retries int
	// agreeWithin bounds the member lists' agreement after a SIGCONT.
	agreeWithin time.Duration
}

// chaosLease is the cluster's lease settings in a chaos run: a paused
// node's sessions are taken over 2 s after its last renewal.
const chaosLease = "lease_ms = 2000\nhandover_timeout_ms = 3000\nleave_timeout_ms = 10000"

// TestClusterChaos runs three node processes, etcd and PostgreSQL while
// the sessions of a client process (internal/testkit/nodetest/swarm) ride out a
// provider outage: chaosShort in the normal test run, chaosFull with
// -tags chaos (chaosRun). About
// every plan.every one random node is killed (SIGKILL) and restarted,
// paused (SIGSTOP for plan.pause, then SIGCONT), or restarted gracefully
// (SIGTERM); PostgreSQL restarts once and etcd stops once. It measures
// and reports:
//
//   - lost prompts: a Prompt call that never returned, or that succeeded
//     while the history holds no answer to it;
//   - duplicate history entries: a prompt twice in a history, or two
//     answers to it;
//   - writes by fenced nodes accepted: a history entry inserted by a
//     transaction that did not pass musepi_fence with the session's
//     current epoch (a trigger added to the test's database checks every
//     insert);
//   - provider calls by stale nodes: a call (seen by the fake LLM server,
//     which knows the calling node by its API key) for a session whose
//     current owner, in the database at that moment, is another node;
//   - the seconds during which the nodes' member lists and etcd
//     disagreed, and how long they took to agree after each SIGCONT;
//   - p50 and p99 from a node's loss (SIGKILL, SIGSTOP) to the next
//     provider call of each session it hosted mid-chain;
//   - the prompts that failed, with their errors and whether they failed
//     during the database or etcd outage.
//
// It fails on any lost prompt, duplicate, accepted fenced write or stale
// call, and on member lists that disagree plan.agreeWithin after a SIGCONT.
func TestClusterChaos(t *testing.T) {
	t.Parallel()
	runChaos(t, chaosRun)
}

// chaosPrompt finds the session in a provider request's body.
var chaosPrompt = regexp.MustCompile(`chaos prompt (chaos-[0-9]+)`)

// chaosCall is one provider call the fake LLM server saw.
type chaosCall struct {
	at      time.Time
	session string
	node    string // the caller, from its API key
	owner   string // the session's owner node then ("" when unknown)
}

// callLog records provider calls and checks each against the session's
// owner in the database.
type callLog struct {
	pool atomic.Pointer[pgxpool.Pool]

	mu      sync.Mutex
	calls   []chaosCall
	unknown int // calls whose owner could not be read (the database away)
}

// observe is nodetest's OnRequest.
func (l *callLog) observe(r *http.Request, body []byte) {
	m := chaosPrompt.FindSubmatch(body)
	pool := l.pool.Load()
	if m == nil || pool == nil {
		return
	}
	c := chaosCall{at: time.Now(), session: string(m[1])}
	_, c.node, _ = strings.Cut(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), "@")
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var owner string
	err := pool.QueryRow(ctx, "SELECT owner FROM musepi_sessions WHERE session_id = $1", c.session).Scan(&owner)
	c.owner, _, _ = strings.Cut(owner, "#") // name#incarnation
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.unknown++
		c.owner = ""
	}
	l.calls = append(l.calls, c)
}

// snapshot is the calls so far.
func (l *callLog) snapshot() []chaosCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// chaosAudit makes the test's database check every history insert: it
// must come from a transaction that passed musepi_fence with the
// session's current epoch. The migration's musepi_fence is kept under
// another name and called by one that also notes the epoch each
// transaction fenced with.
const chaosAudit = `
CREATE UNLOGGED TABLE chaos_fenced (txid bigint, session_id text, epoch bigint);
CREATE TABLE chaos_violations (session_id text, seq bigint, at timestamptz DEFAULT clock_timestamp());
ALTER FUNCTION musepi_fence(text, bigint) RENAME TO chaos_migration_fence;
CREATE FUNCTION musepi_fence(p_session text, p_epoch bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM chaos_migration_fence(p_session, p_epoch);
    INSERT INTO chaos_fenced VALUES (txid_current(), p_session, p_epoch);
END
$$;
CREATE FUNCTION chaos_check() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM chaos_fenced f JOIN musepi_sessions s USING (session_id)
                   WHERE f.txid = txid_current() AND f.session_id = NEW.session_id AND f.epoch = s.epoch) THEN
        INSERT INTO chaos_violations (session_id, seq) VALUES (NEW.session_id, NEW.seq);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER chaos_check BEFORE INSERT ON musepi_entries FOR EACH ROW EXECUTE FUNCTION chaos_check();
`

// chaosOutcome is how one prompt ended.
type chaosOutcome struct {
	at   time.Time
	ok   bool   // answered
	err  string // why not
	done bool   // it returned before swarm's timeout
}

// chaosLoss is a node lost (SIGKILL or SIGSTOP) and the sessions it held
// mid-chain then.
type chaosLoss struct {
	at       time.Time
	node     string
	sessions []string
}

func runChaos(t *testing.T, plan chaosPlan) {
	bin := buildCommand(t)
	sc, err := fakellm.ParseScenario(fmt.Appendf(nil, `{
  "rules": [{"name": "outage", "match": {"to_ms": %d}, "respond": {"preset": "unavailable"}}],
  "default": {"text": "an answer after the outage"}
}`, plan.outage.Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	calls := &callLog{}
	env := nodetest.Start(t, bin, nodetest.Options{Scenario: sc, Extra: chaosLease, OnRequest: calls.observe, KeysPerNode: true,
		MaxRetries: plan.retries})
	nodes := map[string]*nodetest.Node{}
	for _, name := range []string{"node1", "node2", "node3"} {
		nodes[name] = env.StartNode(name)
	}
	if err := env.WaitMembers(3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Enough connections for the owner check of every call in a burst
	// (pgxpool's default is 4 on two cores).
	poolCfg, err := pgxpool.ParseConfig(env.DB)
	if err != nil {
		t.Fatal(err)
	}
	poolCfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, chaosAudit); err != nil {
		t.Fatalf("audit trigger: %v", err)
	}
	calls.pool.Store(pool)

	// The client: swarm, a member in a process of its own, as `musepi rpc
	// --cluster` is (so that this test process holds no protoactor member).
	ids := make([]string, plan.sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("chaos-%04d", i)
	}
	outcomes := map[string]chaosOutcome{}
	var outMu sync.Mutex
	env.LLM.ResetClock()
	start := time.Now()
	swarm := exec.Command(program(t, swarmPkg), "--config", env.WriteConfig("chaos", 0, env.Member("chaos")),
		"--sessions", strconv.Itoa(plan.sessions), "--prefix", "chaos", "--timeout", (plan.run + 4*time.Minute).String())
	swarm.Env = nodetest.Environ()
	var swarmErr strings.Builder
	swarm.Stderr = &swarmErr
	out, err := swarm.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := swarm.Start(); err != nil {
		t.Fatal(err)
	}
	var prompts sync.WaitGroup
	prompts.Go(func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var o struct {
				Session string `json:"session"`
				OK      bool   `json:"ok"`
				Error   string `json:"error"`
				AtMs    int64  `json:"at_ms"`
			}
			if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
				continue // reported below as a prompt that never returned
			}
			outMu.Lock()
			outcomes[o.Session] = chaosOutcome{at: time.UnixMilli(o.AtMs), ok: o.OK, err: o.Error,
				done: !strings.HasSuffix(o.Error, context.DeadlineExceeded.Error())}
			outMu.Unlock()
		}
	})
	unsettled := func() map[string]bool {
		outMu.Lock()
		defer outMu.Unlock()
		m := map[string]bool{}
		for _, id := range ids {
			if _, ok := outcomes[id]; !ok {
				m[id] = true
			}
		}
		return m
	}

	// Member lists, sampled: disagreement time, and agreement after SIGCONT.
	var agreeMu sync.Mutex
	var disagreed time.Duration
	var agreedAt []time.Time
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		const every = 250 * time.Millisecond
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case now := <-tick.C:
				diff := env.Agreement()
				agreeMu.Lock()
				switch {
				case diff == "":
					agreedAt = append(agreedAt, now)
				case !strings.HasPrefix(diff, "etcd: "): // etcd away: nothing to compare with
					disagreed += every
				}
				agreeMu.Unlock()
			}
		}
	})

	// The faults.
	rng := rand.New(rand.NewPCG(1, uint64(plan.sessions))) // the same nodes each run
	owners := func(node string) []string {
		open := unsettled()
		rows, err := pool.Query(ctx, "SELECT session_id FROM musepi_sessions WHERE split_part(owner, '#', 1) = $1", node)
		if err != nil {
			t.Logf("owners of %s: %v", node, err)
			return nil
		}
		defer rows.Close()
		var held []string
		for rows.Next() {
			var id string
			if rows.Scan(&id) == nil && open[id] {
				held = append(held, id)
			}
		}
		return held
	}
	// Node faults take turns (SIGKILL, SIGSTOP, SIGTERM) on a random node.
	// Nothing else happens for 10 s after a SIGCONT, so that the member
	// lists' agreement after it is the pause's alone; and no node fault
	// comes while etcd is away (a node cannot start without it).
	var losses []chaosLoss
	var resumedAt []time.Time
	var pgDown, etcdDown [2]time.Time
	var paused sync.WaitGroup
	var pausedNode atomic.Pointer[nodetest.Node]
	var quietUntil atomic.Int64 // time since start, in nanoseconds
	var faults []string
	nextFault, turn := plan.every, 0
	for time.Since(start) < plan.run {
		time.Sleep(250 * time.Millisecond)
		at := time.Since(start)
		quiet := pausedNode.Load() != nil || at < time.Duration(quietUntil.Load())
		etcdAway := !etcdDown[0].IsZero() && etcdDown[1].IsZero()
		switch {
		case pgDown[0].IsZero() && at >= plan.pgAt && !quiet:
			pgDown[0] = time.Now()
			err := env.PG.Restart(ctx, 0)
			pgDown[1] = time.Now()
			faults = append(faults, fmt.Sprintf("%5.1fs PostgreSQL restarted (%s): %v", at.Seconds(), pgDown[1].Sub(pgDown[0]).Round(time.Millisecond), err))
		case etcdDown[0].IsZero() && at >= plan.etcdAt && !quiet:
			etcdDown[0] = time.Now()
			env.Etcd.Halt()
			faults = append(faults, fmt.Sprintf("%5.1fs etcd stopped", at.Seconds()))
		case etcdAway && time.Since(etcdDown[0]) >= plan.etcdDown:
			err := env.Etcd.Restart()
			etcdDown[1] = time.Now()
			faults = append(faults, fmt.Sprintf("%5.1fs etcd back: %v", at.Seconds(), err))
		case at >= nextFault:
			nextFault += plan.every
			if quiet || etcdAway {
				continue
			}
			var up []string
			for name, n := range nodes {
				if n.Running() {
					up = append(up, name)
				}
			}
			sort.Strings(up)
			if len(up) < 2 {
				continue // keep one node serving
			}
			name := up[rng.IntN(len(up))]
			n := nodes[name]
			turn++
			switch turn % 3 {
			case 1:
				held := owners(name)
				losses = append(losses, chaosLoss{at: time.Now(), node: name, sessions: held})
				n.Kill()
				nodes[name] = env.Restart(n)
				faults = append(faults, fmt.Sprintf("%5.1fs %s killed (SIGKILL) holding %d sessions mid-chain, restarted", at.Seconds(), name, len(held)))
			case 2:
				held := owners(name)
				if err := n.Pause(); err != nil {
					t.Fatal(err)
				}
				losses = append(losses, chaosLoss{at: time.Now(), node: name, sessions: held})
				pausedNode.Store(n)
				faults = append(faults, fmt.Sprintf("%5.1fs %s paused (SIGSTOP) for %s holding %d sessions mid-chain", at.Seconds(), name, plan.pause, len(held)))
				paused.Go(func() {
					time.Sleep(plan.pause)
					_ = n.Resume()
					quietUntil.Store(int64(time.Since(start) + 10*time.Second))
					agreeMu.Lock()
					resumedAt = append(resumedAt, time.Now())
					agreeMu.Unlock()
					pausedNode.Store(nil)
				})
			default:
				took, err := n.Term(30 * time.Second)
				nodes[name] = env.Restart(n)
				faults = append(faults, fmt.Sprintf("%5.1fs %s restarted gracefully (SIGTERM: exited in %s, %v)", at.Seconds(), name, took.Round(time.Millisecond), err))
			}
		}
	}
	paused.Wait()
	if !etcdDown[0].IsZero() && etcdDown[1].IsZero() {
		err := env.Etcd.Restart()
		etcdDown[1] = time.Now()
		faults = append(faults, fmt.Sprintf("%5.1fs etcd back: %v", time.Since(start).Seconds(), err))
	}
	if err := swarm.Wait(); err != nil {
		t.Errorf("swarm: %v\n%s", err, swarmErr.String())
	}
	prompts.Wait()
	settledIn := time.Since(start)
	if _, err := env.WaitAgreement(15 * time.Second); err != nil {
		t.Errorf("after the run: %v", err)
	} else { // the sampler may not tick before it stops
		agreeMu.Lock()
		agreedAt = append(agreedAt, time.Now())
		agreeMu.Unlock()
	}
	close(stopSampling)
	sampler.Wait()

	// Prompts: lost, failed, and when.
	lost, failed := 0, map[string]int{}
	var failedIn [3]int // during the database outage, etcd's, elsewhen
	inWindow := func(at time.Time, w [2]time.Time, grace time.Duration) bool {
		return !w[0].IsZero() && !at.Before(w[0]) && !at.After(w[1].Add(grace))
	}
	var answered []string
	for _, id := range ids {
		o, ok := outcomes[id]
		switch {
		case !ok || !o.done:
			lost++
			t.Errorf("%s: the prompt never returned (%s)", id, o.err)
		case !o.ok:
			failed[o.err]++
			switch {
			case inWindow(o.at, pgDown, 3*time.Second):
				failedIn[0]++
			case inWindow(o.at, etcdDown, 3*time.Second):
				failedIn[1]++
			default:
				failedIn[2]++
			}
		default:
			answered = append(answered, id)
		}
	}

	// Histories: every answered prompt answered once, nothing twice.
	db := openDB(t, env.DB)
	duplicates := 0
	for _, id := range ids {
		entries := db.entries(t, id)
		users, answers := 0, 0
		for _, e := range entries {
			if e.GetUser() != nil {
				users++
			}
			if a := e.GetAssistant(); a != nil && a.GetStopReason() == messages.StopReason_STOP_REASON_STOP {
				answers++
			}
		}
		if users > 1 || answers > 1 {
			duplicates++
			t.Errorf("%s: %d user entries and %d answers in its history", id, users, answers)
		}
		if slices.Contains(answered, id) && answers != 1 {
			lost++
			t.Errorf("%s: the prompt succeeded, and its history holds %d answers", id, answers)
		}
	}
	var violations int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM chaos_violations").Scan(&violations); err != nil {
		t.Fatal(err)
	}
	var fencedLines int
	for _, n := range env.Nodes() {
		fencedLines += strings.Count(n.Output().String(), "taken over by a newer activation")
	}

	// Provider calls: stale ones, and each lost node's sessions' next call.
	all := calls.snapshot()
	stale := 0
	for _, c := range all {
		if c.owner != "" && c.owner != c.node {
			stale++
			if stale <= 10 {
				t.Errorf("stale call: %s called for %s at +%.1fs while %s owned it",
					c.node, c.session, c.at.Sub(start).Seconds(), c.owner)
			}
		}
	}
	var gaps []time.Duration
	for _, l := range losses {
		for _, id := range l.sessions {
			for _, c := range all {
				if c.session == id && c.at.After(l.at) && c.node != l.node {
					gaps = append(gaps, c.at.Sub(l.at))
					break
				}
			}
		}
	}
	slices.Sort(gaps)
	pct := func(p float64) time.Duration {
		if len(gaps) == 0 {
			return 0
		}
		return gaps[min(len(gaps)-1, int(p*float64(len(gaps))))]
	}

	// Agreement after each SIGCONT.
	var afterResume []string
	for _, r := range resumedAt {
		i := slices.IndexFunc(agreedAt, func(a time.Time) bool { return a.After(r) })
		if i < 0 {
			t.Errorf("member lists never agreed after the SIGCONT at +%.1fs", r.Sub(start).Seconds())
			continue
		}
		took := agreedAt[i].Sub(r)
		afterResume = append(afterResume, took.Round(100*time.Millisecond).String())
		if took > plan.agreeWithin {
			t.Errorf("member lists agreed %s after the SIGCONT at +%.1fs, want within %s", took, r.Sub(start).Seconds(), plan.agreeWithin)
		}
	}

	var report strings.Builder
	fmt.Fprintf(&report, "chaos run: %d sessions, 3 nodes, %s of faults, provider outage %s; every prompt returned %s after the start\n",
		plan.sessions, plan.run, plan.outage, settledIn.Round(time.Second))
	for _, f := range faults {
		fmt.Fprintf(&report, "  %s\n", f)
	}
	fmt.Fprintf(&report, "prompts: %d answered, %d failed (%d during the database restart, %d during the etcd outage, %d elsewhen), %d lost\n",
		len(answered), failedIn[0]+failedIn[1]+failedIn[2], failedIn[0], failedIn[1], failedIn[2], lost)
	for msg, n := range failed {
		fmt.Fprintf(&report, "  %d× %s\n", n, msg)
	}
	fmt.Fprintf(&report, "duplicate history entries: %d; writes by fenced nodes accepted: %d (refusals logged by nodes: %d)\n",
		duplicates, violations, fencedLines)
	fmt.Fprintf(&report, "provider calls: %d, by stale nodes: %d (%d not checked: the database away)\n", len(all), stale, calls.unknown)
	fmt.Fprintf(&report, "member lists disagreed for %s in all; agreed after each SIGCONT in %v\n", disagreed, afterResume)
	fmt.Fprintf(&report, "node loss → next attempt of its sessions mid-chain: %d sessions, p50 %s, p99 %s\n",
		len(gaps), pct(0.50).Round(10*time.Millisecond), pct(0.99).Round(10*time.Millisecond))
	t.Log(report.String())
	if duplicates > 0 || violations > 0 || stale > 0 {
		t.Errorf("%d duplicates, %d fenced writes accepted, %d stale calls; want none", duplicates, violations, stale)
	}
}
