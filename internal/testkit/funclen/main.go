// Command funclen lists the long function declarations of the module, as
// issue 27 counts them: every `func` outside tests (`_test.go`), generated
// code (a "Code generated ... DO NOT EDIT." line), bench/, examples/ and
// testdata, measured in lines from `func` to its closing brace. Run it from
// the module's root:
//
//	go run ./internal/testkit/funclen             # list those over 50 lines
//	go run ./internal/testkit/funclen -long 45 -max 60 -allow 10
//
// It prints one line per long function, longest first, then the counts,
// and exits 1 when a function is over -max lines or more than -allow are
// over -long (when those flags are set).
//
// It is part of the test kit (internal/testkit): .ci/run runs it, with
// the bound docs/testing.md ("Function length") gives.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// skipped are the directories funclen does not read, by name anywhere in
// the tree (testdata, node_modules, hidden ones) or by path from the root.
var (
	skippedNames = map[string]bool{"testdata": true, "node_modules": true}
	skippedPaths = map[string]bool{"bench": true, "examples": true}
)

// function is one declaration and its length in lines.
type function struct {
	pos   string // file:line
	name  string // Recv.Name or Name
	lines int
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("funclen", flag.ContinueOnError)
	flags.SetOutput(stderr)
	long := flags.Int("long", 50, "list the functions over this many lines")
	maxLines := flags.Int("max", 0, "fail when a function is over this many lines (0: no limit)")
	allow := flags.Int("allow", -1, "fail when more than this many functions are over -long (-1: no limit)")
	root := flags.String("root", ".", "the module's root directory")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	funcs, err := measure(*root)
	if err != nil {
		fmt.Fprintf(stderr, "funclen: %v\n", err)
		return 1
	}
	var over, overMax int
	for _, f := range funcs {
		if f.lines > *long {
			over++
			fmt.Fprintf(stdout, "%4d %s %s\n", f.lines, f.pos, f.name)
		}
		if *maxLines > 0 && f.lines > *maxLines {
			overMax++
		}
	}
	fmt.Fprintf(stdout, "%d functions, %d over %d lines", len(funcs), over, *long)
	if *maxLines > 0 {
		fmt.Fprintf(stdout, ", %d over %d", overMax, *maxLines)
	}
	fmt.Fprintln(stdout)
	if overMax > 0 || (*allow >= 0 && over > *allow) {
		fmt.Fprintf(stdout, "FAIL: want none over %d lines and at most %d over %d\n", *maxLines, *allow, *long)
		return 1
	}
	return 0
}

// measure returns the counted function declarations under root, longest
// first.
func measure(root string) ([]function, error) {
	var funcs []function
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (skippedNames[d.Name()] || skippedPaths[filepath.ToSlash(rel)] || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(file) {
			return nil
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			funcs = append(funcs, function{pos: fmt.Sprintf("%s:%d", filepath.ToSlash(rel), start.Line),
				name: name(fn), lines: end.Line - start.Line + 1})
		}
		return nil
	})
	sort.SliceStable(funcs, func(i, j int) bool { return funcs[i].lines > funcs[j].lines })
	return funcs, err
}

// name is fn's name with its receiver's type: (*T).M, T.M or F.
func name(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	star := ""
	if s, ok := t.(*ast.StarExpr); ok {
		t, star = s.X, "*"
	}
	if ix, ok := t.(*ast.IndexExpr); ok { // a generic receiver T[P]
		t = ix.X
	}
	if ix, ok := t.(*ast.IndexListExpr); ok {
		t = ix.X
	}
	recv := fmt.Sprint(t)
	if star != "" {
		return fmt.Sprintf("(*%s).%s", recv, fn.Name.Name)
	}
	return recv + "." + fn.Name.Name
}
