package sourceguard

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrackedGoFilesFitTheirLimits holds every tracked non-test Go file to
// MaxFileLines and its functions to MaxFuncLines, or to a written reason.
func TestTrackedGoFilesFitTheirLimits(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("the guard reads the tracked files through git, and this is not a git checkout: %v", err)
	}
	root := strings.TrimSpace(string(top))
	cmd := exec.Command("git", "ls-files", "-z", "*.go")
	cmd.Dir = root
	list, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	n, scanned := 0, 0
	for _, f := range strings.Split(string(list), "\x00") {
		if f == "" || strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if os.IsNotExist(err) {
			continue // deleted but not yet committed
		}
		if err != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		scanned++
		found, err := Scan(f, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range found {
			n++
			t.Errorf("%s:%d: %s", f, h.Line, h)
		}
	}
	if scanned == 0 {
		t.Fatal("git ls-files listed no Go files")
	}
	if n > 0 {
		t.Logf("%d over their limit: split the file by job or the function into steps; a function kept whole carries a %q line in its doc comment (CONTRIBUTING.md)", n, "// "+ReasonPrefix+" <reason>")
	}
}
