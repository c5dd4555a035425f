package main

import (
	"fmt"
	"io"
	"os"

	"github.com/musepi/musepi/history"
)

func init() {
	commands["history"] = command{summary: "check or repair a session history file (musepi history check|repair FILE)", run: runHistory}
}

// historyOut is where "musepi history" reports.
var historyOut io.Writer = os.Stdout

func historyUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: musepi history check FILE")
	fmt.Fprintln(w, "       musepi history repair FILE")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "check reads a session history file (HISTORY_DIR/SESSION.jsonl) and lists every")
	fmt.Fprintln(w, "line a session would refuse to open with; it changes nothing. Exit 0 when the")
	fmt.Fprintln(w, "file opens as it is, 1 when it does not.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "repair keeps the original as FILE.bak, drops a partial last line and the lines")
	fmt.Fprintln(w, "that are not entries, renumbers seq 1..n and adds the format header. Unknown")
	fmt.Fprintln(w, "fields are kept. It refuses while a session holds the file open.")
}

// runHistory is "musepi history check|repair FILE".
func runHistory(args []string) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		historyUsage(stderr)
		return 0
	}
	if len(args) != 2 || (args[0] != "check" && args[0] != "repair") {
		historyUsage(stderr)
		return 2
	}
	path := args[1]
	if args[0] == "check" {
		rep, err := history.Check(path)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		printReport(rep)
		if !rep.OK() {
			fmt.Fprintf(stderr, "%s: a session will not open it; run \"musepi history repair %s\"\n", path, path)
			return 1
		}
		return 0
	}
	rep, err := history.Repair(path)
	if rep != nil {
		printReport(rep)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if rep.OK() && rep.TornBytes == 0 && rep.Version == history.FormatVersion {
		fmt.Fprintf(historyOut, "%s: nothing to repair\n", path)
		return 0
	}
	after, err := history.Check(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(historyOut, "%s: repaired: %d entries, format version %d; the original is %s.bak\n",
		path, after.Entries, after.Version, path)
	return 0
}

// printReport writes what Check found: a summary line on historyOut, each
// problem on stderr.
func printReport(r *history.Report) {
	version := fmt.Sprintf("format version %d", r.Version)
	if r.Version == 0 {
		version = "no format header (written before version 1)"
	}
	status := "ok"
	if !r.OK() {
		status = fmt.Sprintf("%d problem(s)", len(r.Problems))
	}
	fmt.Fprintf(historyOut, "%s: %s: %d entries, %s\n", r.Path, status, r.Entries, version)
	if r.TornBytes > 0 {
		fmt.Fprintf(historyOut, "%s: a partial last line of %d bytes (a crash mid-write; dropped when the session opens)\n", r.Path, r.TornBytes)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(stderr, "%s:%d: %v\n", r.Path, p.Line, p.Err)
	}
}
