package docguard

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// allowed are the legitimate uses of a forbidden word, by file and rule,
// each with its reason. Keep it short: a new entry needs a reason a reviewer
// accepts, and rewording the text is nearly always the better fix.
var allowed = []struct {
	file, rule string
	line       int // 0 allows every line
	reason     string
}{
	{"internal/docguard/words_test.go", "*", 0, "the detector's own cases: each forbidden form must appear once to prove it is caught"},
	{"internal/docguard/links_test.go", RuleMarkdown, 0, "the link detector's cases name pages that do not exist, to prove a broken link is caught"},
	{"internal/componentdocs/render.go", RuleMarkdown, 0, "writes docs/components/README.md, whose links are relative to that page; the link test checks them there"},
	{"migrations/00001_roles.sql", RuleTheSpec, 13, "a released migration never changes: migrate refuses a file whose checksum differs from the one applied"},
	{"migrations/00004_transactions.sql", RuleTheSpec, 18, "a released migration never changes: migrate refuses a file whose checksum differs from the one applied"},
}

func isAllowed(f Finding, file string) bool {
	for _, a := range allowed {
		if a.file == file && (a.rule == "*" || a.rule == f.Rule) && (a.line == 0 || a.line == f.Line) {
			return true
		}
	}
	return false
}

// skipped are tracked files that are not text anyone reads: checksums.
var skipped = map[string]bool{"go.sum": true}

// tree is the repository as a fresh clone has it: the root and every tracked
// file that is on disk (a file deleted but not yet committed is left out).
type tree struct {
	root  string
	files []string
	set   map[string]bool
	dirs  map[string]bool
}

func loadTree(t *testing.T) *tree {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("the guard reads the tracked files through git, and this is not a git checkout: %v", err)
	}
	root := strings.TrimSpace(string(top))
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	list, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	tr := &tree{root: root, set: map[string]bool{}, dirs: map[string]bool{}}
	for _, f := range strings.Split(string(list), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(f))); err != nil {
			continue
		}
		tr.files = append(tr.files, f)
		tr.set[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			tr.dirs[d] = true
		}
	}
	sort.Strings(tr.files)
	if len(tr.files) == 0 {
		t.Fatal("git ls-files listed no files")
	}
	return tr
}

// read returns a tracked file's text, or ok false for a binary file.
func (tr *tree) read(t *testing.T, f string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tr.root, filepath.FromSlash(f)))
	if err != nil {
		t.Fatalf("reading %s: %v", f, err)
	}
	head := b
	if len(head) > 8000 {
		head = head[:8000]
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return "", false
	}
	return string(b), true
}

// TestTrackedFilesSpeakOfTheProduct refuses development history in any
// tracked file: a comment, a description or a page gives the reason itself.
func TestTrackedFilesSpeakOfTheProduct(t *testing.T) {
	tr := loadTree(t)
	shipped := func(p string) bool { return tr.set[p] }
	n := 0
	for _, f := range tr.files {
		if skipped[f] {
			continue
		}
		text, ok := tr.read(t, f)
		if !ok {
			continue
		}
		for _, h := range ScanWords(f, text, shipped) {
			if isAllowed(h, f) {
				continue
			}
			n++
			t.Errorf("%s:%d: %s: %q", f, h.Line, h.Rule, h.Match)
		}
	}
	if n > 0 {
		t.Logf("%d forbidden uses: say the reason itself (or link to docs/design/performance.md); a legitimate use goes in the allow-list of internal/docguard/tree_test.go with its reason", n)
	}
}

// TestMarkdownLinksResolve holds every relative link and #anchor of every
// tracked Markdown page to a tracked file and a heading that exist.
func TestMarkdownLinksResolve(t *testing.T) {
	tr := loadTree(t)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(f string) map[string]bool {
		if a, ok := anchors[f]; ok {
			return a
		}
		text, _ := tr.read(t, f)
		anchors[f] = Anchors(text)
		return anchors[f]
	}
	repo := Repo{
		IsFile:  func(p string) bool { return tr.set[p] },
		IsDir:   func(p string) bool { return p == "." || tr.dirs[p] },
		Anchors: anchorsOf,
	}
	for _, f := range tr.files {
		if !strings.HasSuffix(strings.ToLower(f), ".md") {
			continue
		}
		text, _ := tr.read(t, f)
		for _, l := range ScanLinks(text) {
			if err := repo.Resolve(f, l); err != nil {
				t.Errorf("%s:%d: %s: %v", f, l.Line, l.Dest, err)
			}
		}
	}
}
