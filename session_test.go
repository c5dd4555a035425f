package musepi_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/musepi/musepi"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var retryEvents = []string{"auto_retry_start", "auto_retry_end", "agent_end", "agent_settled",
	"retry_fallback_applied", "retry_fallback_succeeded", "model_change", "compaction_required"}

func TestTransientErrorRetriedUntilSuccess(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), fail(503, "503 Service Unavailable"), answer("hello"))
	ch := h.prompt(s, "hi")
	h.run()
	r := h.settle(ch)
	if r.err != nil || r.msg.GetContent()[0].GetText().GetText() != "hello" {
		t.Fatalf("prompt = %v, %v", r.msg, r.err)
	}
	expectLines(t, rec.lines(retryEvents...),
		"agent_end willRetry=true",
		"auto_retry_start 1/10 delay=500ms class=transient",
		"agent_end willRetry=true",
		"auto_retry_start 2/10 delay=1000ms class=transient",
		"agent_end willRetry=false",
		"auto_retry_end success=true attempt=2",
		"agent_settled success=true",
	)
}
