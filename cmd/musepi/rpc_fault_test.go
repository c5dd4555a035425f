package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musepi/musepi/provider/fakellm"
)

// endless is a scenario whose answer streams for about a minute (10,000
// chunks 5 ms apart): for the tests, a stream that does not end by itself.
var endless = fmt.Sprintf(`{"default":{"text":%q,"chunks":10000,"chunk_delay_ms":5}}`, strings.Repeat("word ", 2000))

func TestRPCFaults(t *testing.T) {
	t.Parallel() // mostly waiting on processes
	bin := buildCommand(t)

	t.Run("SIGTERM during an endless stream settles the prompt as aborted before exit", func(t *testing.T) {
		p := startRPC(t, bin, endless)
		p.send(`{"id":"1","type":"prompt","message":"talk forever"}`)
		p.next("message_update", 10*time.Second)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		settled := p.next("agent_settled", 10*time.Second)
		if settled["success"] != false || !strings.Contains(fmt.Sprint(settled["error"]), "abort") {
			t.Fatalf("agent_settled %v, want an aborted prompt", settled)
		}
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	})

	t.Run("a client that closes stdout: logged, the prompt aborted, the history kept", func(t *testing.T) {
		dir := t.TempDir()
		sc, err := fakellm.ParseScenario([]byte(endless))
		if err != nil {
			t.Fatal(err)
		}
		srv := fakellm.New(sc)
		base, err := srv.Start("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		cmd := exec.Command(bin, "rpc", "--provider", "openai", "--base-url", base+"/v1", "--model", "m1",
			"--history-dir", dir, "--session-id", "closed")
		cmd.Env = append(os.Environ(), "OPENAI_API_KEY=key-a")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Write([]byte(`{"id":"1","type":"prompt","message":"keep me"}` + "\n")); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		for lines.Scan() && !strings.Contains(lines.Text(), `"message_update"`) {
		}
		out.Close() // the client goes away mid-stream; stdin stays open

		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err = <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("musepi rpc kept running after its stdout closed; stderr %q", stderr.String())
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("exit %v, want code 1 (not killed by SIGPIPE); stderr %q", err, stderr.String())
		}
		if !strings.Contains(stderr.String(), "broken pipe") {
			t.Errorf("stderr %q, want the broken pipe reported", stderr.String())
		}
		again := startRPC(t, bin, `{}`, "--history-dir", dir, "--session-id", "closed")
		again.send(`{"id":"m","type":"get_messages"}`)
		msgs := again.response("m")["data"].(map[string]any)["messages"].([]any)
		if len(msgs) == 0 || msgs[0].(map[string]any)["content"] != "keep me" {
			t.Fatalf("messages after restart: %v", msgs)
		}
	})
}
