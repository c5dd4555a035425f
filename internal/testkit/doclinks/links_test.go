package doclinks

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// link is one link target in a Markdown file.
type link struct {
	line   int
	target string
}

var (
	// inlineLink is [text](target) or ![alt](target), with an optional title.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refDef is a reference definition: [label]: target
	refDef = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s.*)?$`)
	// codeSpan is inline code, whose text is not Markdown.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// scheme starts an absolute URL (https:, mailto:, ...).
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// links returns the link targets of a Markdown text, outside fenced code
// blocks and code spans.
func links(text []byte) []link {
	var out []link
	fence := ""
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			out = append(out, link{n, m[1]})
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			out = append(out, link{n, m[1]})
		}
	}
	return out
}

// headingRE is an ATX heading.
var headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)

// anchors returns the GitHub anchors of a Markdown text's headings: lower
// case, punctuation dropped, spaces as hyphens, "-1", "-2"... for repeats.
func anchors(text []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for line := range strings.SplitSeq(string(text), "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if k := seen[slug]; k > 0 {
			out[slug+"-"+strconv.Itoa(k)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// check returns what is wrong with target, a link in the file at path
// (relative to root); "" when it resolves.
func check(root, path, target string) string {
	if scheme.MatchString(target) {
		if strings.HasPrefix(target, "file:") {
			return "points at the local file system"
		}
		return "" // a public site
	}
	file, fragment, _ := strings.Cut(target, "#")
	if strings.HasPrefix(file, "/") {
		return "an absolute path: outside the repository for anyone who clones it"
	}
	dest := path
	if file != "" {
		dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
		if dest == ".." || strings.HasPrefix(dest, ".."+string(filepath.Separator)) {
			return "leads outside the repository"
		}
	}
	st, err := os.Stat(filepath.Join(root, dest))
	if err != nil {
		return "no such file or folder in the repository"
	}
	if fragment == "" || st.IsDir() || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	text, err := os.ReadFile(filepath.Join(root, dest))
	if err != nil {
		return err.Error()
	}
	if !anchors(text)[fragment] {
		return "no heading #" + fragment + " in " + filepath.ToSlash(dest)
	}
	return ""
}

// repoRoot is the folder holding go.mod, above this package's.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

// markdownFiles lists the repository's Markdown files: those git tracks
// (and new ones it does not ignore), or without git every *.md file outside
// hidden folders.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		return strings.Fields(string(out))
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Every relative link in the repository's Markdown resolves.
func TestMarkdownLinks(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	if !slices.Contains(files, "README.md") {
		t.Fatalf("README.md not among the Markdown files %v", files)
	}
	checked := 0
	for _, f := range files {
		text, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(text) {
			checked++
			if problem := check(root, f, l.target); problem != "" {
				t.Errorf("%s:%d: link %q: %s", f, l.line, l.target, problem)
			}
		}
	}
	t.Logf("%d links in %d Markdown files", checked, len(files))
}

func TestLinksAndAnchors(t *testing.T) {
	text := []byte("# MusePi\n" +
		"See [the policy](docs/retry-policy.md#2-classification) and ![plot](bench/x.svg \"title\").\n" +
		"`[not a link](nope.md)` but [a link](a.md).\n" +
		"```\n[in a block](nope.md)\n```\n" +
		"[ref]: ../shared/spec.md\n" +
		"## Two commands\n## Two commands\n## `retry/`: the policy, 2.0!\n")
	var got []string
	for _, l := range links(text) {
		got = append(got, l.target)
	}
	want := []string{"docs/retry-policy.md#2-classification", "bench/x.svg", "a.md", "../shared/spec.md"}
	if !slices.Equal(got, want) {
		t.Errorf("links %q, want %q", got, want)
	}
	a := anchors(text)
	for _, want := range []string{"musepi", "two-commands", "two-commands-1", "retry-the-policy-20"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
}

func TestCheck(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"README.md", "docs/rpc.md"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), []byte("# Title\n## The commands\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		from, target string
		ok           bool
	}{
		{"README.md", "docs/rpc.md", true},
		{"README.md", "docs/rpc.md#the-commands", true},
		{"README.md", "docs/rpc.md#missing", false},
		{"README.md", "#title", true},
		{"README.md", "docs/", true},
		{"docs/rpc.md", "../README.md", true},
		{"README.md", "../shared/spec/retry-policy.md", false},
		{"README.md", "/etc/passwd", false},
		{"README.md", "file:///tmp/x.md", false},
		{"README.md", "docs/missing.md", false},
		{"README.md", "https://go.dev/doc/", true},
	}
	for _, tc := range cases {
		if problem := check(root, tc.from, tc.target); (problem == "") != tc.ok {
			t.Errorf("%s → %s: problem %q, want ok=%v", tc.from, tc.target, problem, tc.ok)
		}
	}
}
