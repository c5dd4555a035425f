package testbin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A set whose directory is named by Env waits there for the runner's build
// to end, and leaves the directory to the runner.
func TestSetWaitsForTheRunnersBuild(t *testing.T) {
	for _, tc := range []struct {
		name    string
		marker  string // the file the runner writes, after a while
		content string
		wantErr string // "" for success
	}{
		{name: "built", marker: readyFile},
		{name: "failed", marker: failedFile, content: "go build: exit status 1\nmain.go:3: undefined: x",
			wantErr: "undefined: x"},
		{name: "never ends", wantErr: "context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv(Env, dir)
			if tc.marker != "" {
				time.AfterFunc(100*time.Millisecond, func() {
					_ = writeMarker(dir, tc.marker, []byte(tc.content))
				})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s := NewSet("example.com/cmd/tool")
			err := s.Build(ctx)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Build: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Build: %v, want an error with %q", err, tc.wantErr)
			}
			if err2 := s.Build(context.Background()); err2 != err {
				t.Errorf("second Build: %v, want the first's %v", err2, err)
			}
			if got, want := s.Path("example.com/cmd/tool"), filepath.Join(dir, "tool"); got != want {
				t.Errorf("Path: %s, want %s", got, want)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); err != nil {
				t.Errorf("Close removed the runner's directory: %v", err)
			}
		})
	}
}

// BuildAll says how the build went in the directory: a failure leaves its
// reason for the waiting tests.
func TestBuildAllReportsAFailure(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // go build cannot start
	if err := BuildAll(ctx, dir); err == nil {
		t.Fatal("BuildAll succeeded with a cancelled context")
	}
	if err := wait(context.Background(), dir); err == nil || !strings.Contains(err.Error(), "failed") {
		t.Errorf("wait after a failed build: %v", err)
	}
}
