package main

import (
	"flag"
	"fmt"

	"github.com/musepi/musepi/cmd/musepi/internal/opsview"
	"github.com/musepi/musepi/history"
)

var historyCommand = &command{
	summary:  "check or repair a history file, show a cluster session's history (history check|repair|show)",
	synopsis: []string{"check FILE", "repair FILE", "show --config FILE [--json] ID"},
	about: `
Checks and repairs session history files (HISTORY_DIR/SESSION.jsonl), and
shows a session's history from a cluster's database.`,
	commands: map[string]*command{
		"show": {
			summary:  "print a cluster session's history from the database, decoded",
			synopsis: []string{"--config FILE [--json] [--timeout D] ID"},
			about: `
Prints the history of session ID from the database of the cluster the file's
[cluster] table names, its protobuf entries decoded: one line each (seq,
time, kind, content, texts quoted), or with --json as a history file holds
them (the format header, then one JSON entry per line: what "musepi history
check" reads, and what a session opens from HISTORY_DIR/ID.jsonl). It reads
only: it takes no epoch, and the session goes on wherever it is hosted.`,
			args:  []string{"ID"},
			setup: setupHistoryShow,
		},
		"check": {
			summary:  "list the lines a session would refuse to open a history file with",
			synopsis: []string{"FILE"},
			about: `
Reads a session history file (HISTORY_DIR/SESSION.jsonl) and lists every line
a session would refuse to open with, one "FILE:LINE: problem" line each on
stderr; it changes nothing. Exits 0 when the file opens as it is, 1 when it
does not.`,
			args:  []string{"FILE"},
			setup: noFlags(checkHistory),
		},
		"repair": {
			summary:  "make a history file open again, keeping the original as FILE.bak",
			synopsis: []string{"FILE"},
			about: `
Keeps the original as FILE.bak, drops a partial last line and the lines that
are not entries, renumbers seq 1..n and adds the format header. Unknown
fields are kept. It refuses while a session holds the file open.`,
			args:  []string{"FILE"},
			setup: noFlags(repairHistory),
		},
	},
}

// checkHistory is "musepi history check FILE". The file's problems are its
// findings, printed as they are; a file it cannot read is its failure.
func checkHistory(args []string) error {
	path := args[0]
	rep, err := history.Check(path)
	if err != nil {
		return err
	}
	printReport(rep)
	if !rep.OK() {
		fmt.Fprintf(stderr, "%s: a session will not open it; run \"musepi history repair %s\"\n", path, path)
		return exitCode(exitFailure)
	}
	return nil
}

// repairHistory is "musepi history repair FILE".
func repairHistory(args []string) error {
	path := args[0]
	rep, err := history.Repair(path)
	if rep != nil {
		printReport(rep)
	}
	if err != nil {
		return err
	}
	if rep.OK() && rep.TornBytes == 0 && rep.Version == history.FormatVersion {
		fmt.Fprintf(stdout, "%s: nothing to repair\n", path)
		return nil
	}
	after, err := history.Check(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: repaired: %d entries, format version %d; the original is %s.bak\n",
		path, after.Entries, after.Version, path)
	return nil
}

// printReport writes what Check found: a summary line on stdout, each
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
	fmt.Fprintf(stdout, "%s: %s: %d entries, %s\n", r.Path, status, r.Entries, version)
	if r.TornBytes > 0 {
		fmt.Fprintf(stdout, "%s: a partial last line of %d bytes (a crash mid-write; dropped when the session opens)\n", r.Path, r.TornBytes)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(stderr, "%s:%d: %v\n", r.Path, p.Line, p.Err)
	}
}

// setupHistoryShow is "musepi history show --config FILE ID".
func setupHistoryShow(fs *flag.FlagSet) func([]string) error {
	f := addOpsFlags(fs)
	return func(args []string) error {
		if err := f.check(); err != nil {
			return err
		}
		return showHistory(f, args[0])
	}
}

// showHistory prints session id's history from the cluster's database.
func showHistory(f opsFlags, id string) error {
	cc, ctx, cancel, err := f.cluster()
	if err != nil {
		return err
	}
	defer cancel()
	in, err := inspect(ctx, cc)
	if err != nil {
		return err
	}
	defer in.Close()
	entries, err := in.History(ctx, id)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	if *f.json {
		return history.Export(stdout, entries)
	}
	return opsview.WriteHistory(stdout, entries)
}
