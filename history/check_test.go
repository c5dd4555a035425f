package history_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/musepi/musepi/history"
)

// Check lists every problem and changes nothing; Repair keeps the
// original as .bak and leaves a file that opens, with seq renumbered and
// unknown fields kept.
func TestCheckAndRepair(t *testing.T) {
	all := sample()
	dup := linesOf(t, all[0], all[1]) + "garbage\n" + linesOf(t, all[0]) // today's bug: seq restarted after a bad line
	unknown := `{"seq":"3","toolResult":{"toolCallId":"t9","output":"x"},"newField":[1,2]}` + "\n"
	content := dup + unknown + `{"seq":"4","us`
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	writeFile(t, path, content)

	rep, err := history.Check(path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Version != 0 || rep.Entries != 4 || rep.TornBytes != len(`{"seq":"4","us`) || len(rep.Problems) != 3 ||
		rep.Problems[0].Line != 3 || rep.Problems[1].Line != 4 || rep.Problems[2].Line != 5 {
		t.Fatalf("Check = %+v", rep)
	}
	if readFile(t, path) != content {
		t.Fatal("Check changed the file")
	}

	if _, err := history.Repair(path); err != nil {
		t.Fatal(err)
	}
	if readFile(t, path+".bak") != content {
		t.Fatal("the backup is not the original")
	}
	after, err := history.Check(path)
	if err != nil || !after.OK() || after.Version != history.FormatVersion || after.Entries != 4 || after.TornBytes != 0 {
		t.Fatalf("Check after Repair = %+v, %v", after, err)
	}
	repaired := readFile(t, path)
	if !strings.Contains(repaired, `"newField":[1,2]`) || !strings.Contains(repaired, `"seq":"4"`) {
		t.Fatalf("repaired file lost an unknown field or was not renumbered:\n%s", repaired)
	}
	l, got := openLog(t, openFile(t, dir), "s")
	l.Close()
	if len(got) != 4 || got[2].GetUser().GetText() != all[0].GetUser().GetText() || got[3].GetToolResult().GetToolCallId() != "t9" {
		t.Fatalf("repaired history opens as %v", got)
	}
	if _, err := history.Repair(path); err != nil {
		t.Fatalf("repairing a sound file: %v", err)
	}
}

func TestRepairRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	t.Run("a file a session holds", func(t *testing.T) {
		openLog(t, openFile(t, dir), "s")
		if _, err := history.Repair(path); !errors.Is(err, history.ErrLocked) {
			t.Fatalf("Repair of an open session = %v", err)
		}
	})
	t.Run("an existing backup", func(t *testing.T) {
		writeFile(t, path, "junk\n")
		writeFile(t, path+".bak", "older\n")
		if _, err := history.Repair(path); !errors.Is(err, os.ErrExist) || readFile(t, path) != "junk\n" {
			t.Fatalf("Repair over a backup = %v", err)
		}
	})
	t.Run("a newer format", func(t *testing.T) {
		newer := `{"format":"musepi.history","version":2}` + "\n"
		writeFile(t, path, newer)
		os.Remove(path + ".bak")
		if _, err := history.Repair(path); err == nil || !strings.Contains(err.Error(), "version 2") || readFile(t, path) != newer {
			t.Fatalf("Repair of a newer format = %v", err)
		}
	})
}

// An append must continue the history's seq.
func TestAppendChecksSeq(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			l, _ := openLog(t, st.open(t), "s")
			if err := l.Append(sample()[1]); !errors.Is(err, history.ErrInvalid) {
				t.Fatalf("Append of seq 2 first = %v", err)
			}
			if err := l.Append(sample()[:2]...); err != nil {
				t.Fatal(err)
			}
			if err := l.Append(sample()[1]); !errors.Is(err, history.ErrInvalid) {
				t.Fatalf("Append of a duplicate seq = %v", err)
			}
		})
	}
}
