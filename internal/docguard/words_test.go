package docguard

import (
	"strings"
	"testing"
)

// Each case is a file's text, named as in the repository, and the rules its
// findings must break, in order; none means the text must pass. A detector
// that stopped catching its line fails here before it can let the tree
// through.
func TestScanWords(t *testing.T) {
	shipped := map[string]bool{"README.md": true, "docs/kafka.md": true, "docs/design/performance.md": true}
	cases := []struct {
		name, file, text string
		want             []string
	}{
		// Numbered sessions, in any spelling; the word alone is a connection.
		{"session number", "a.go", "// measured in session 19", []string{RuleSession}},
		{"session range", "README.md", "sessions 5–19 measured it", []string{RuleSession}},
		{"session hash", "a.yaml", "# see session #7", []string{RuleSession}},
		{"session over a line break", "a.go", "// peak RSS 682 MB at 1M in session\n// 7. Since then", []string{RuleSession}},
		{"database session", "a.go", "// binding the session to workspace %s", nil},
		{"session timeout", "a.go", `Description("Kafka's session.timeout.ms; 6s is the least")`, nil},
		{"session then a number later", "a.go", "// a session's advisory lock; 3 retries", nil},

		// Issue numbers and an issue referred to without one.
		{"issue number", "a.go", "// TestX (issue 10, item 10)", []string{RuleIssue}},
		{"issue hash number", "a.md", "Fixed by issue #33.", []string{RuleIssue}},
		{"issue capitalised", "a.go", "// Issue 13's memory aim", []string{RuleIssue}},
		{"an issue's item", "a.go", "// every Sealer takes its own nonce (item 16)", []string{RuleIssue}},
		{"an item of a list", "a.go", `wantErr: "item 2 of 3 is empty"`, nil},
		{"the issue", "a.go", "// as the issue asks", []string{RuleTheIssue}},
		{"the issue's", "a.go", "// the issue's 1,000,000 events", []string{RuleTheIssue}},
		{"the issue over a line break", "a.sql", "-- as the\n-- issue says", []string{RuleTheIssue}},
		{"issue as a source", "a.go", `"≤ 11 µs (issue)"`, []string{RuleTheIssue}},
		{"a certificate issuer", "a.go", "issue := func(serial int64) {} // the issuer signs", nil},

		// A specification cited instead of explained.
		{"the spec", "a.yaml", "# the spec's default is SP_DB_URL", []string{RuleTheSpec}},
		{"the spec capitalised", "a.go", "// The spec's line: count comes right after msg.", []string{RuleTheSpec}},
		{"a named spec", "a.sql", "-- the persister spec's troubleshooting case", []string{RuleTheSpec}},
		{"a spec that speaks", "a.go", "// as our spec says", []string{RuleTheSpec}},
		{"a Go type named Spec", "a.go", "// Spec says how topics are created.", nil},
		{"a config spec", "a.go", `t.Fatalf("parsing YAML through the config spec: %v", err)`, nil},
		{"the specification word", "a.go", "// see the specifications of RFC 9110", nil},
		{"a shared folder", "a.md", "See ../shared/spec for more.", []string{RuleShared}},
		{"a shared folder two up", "a.go", "// ../../shared/design", []string{RuleShared}},

		// Commit hashes given as a reason; hex data is not one.
		{"hash in parentheses", "a.go", "// the arguments were 406 B an entity (cc1eb66).", []string{RuleHash}},
		{"hash after since", "a.go", "// 3,800 since 017a865", []string{RuleHash}},
		{"hash after commit", "a.md", "measured at commit 4f3c2a1b", []string{RuleHash}},
		{"hash in backticks", "a.md", "the COPY path (`9b1e77c`) halved it", []string{RuleHash}},
		{"hex test data", "a.go", "`\"metadata\":{\"device_id\":\"a1b2c3d4\"}`", nil},
		{"uuid part", "a.go", `id := "6f1c2b9e-0c1d-4e5f-8a9b-0c1d2e3f4a5b"`, nil},
		{"pseudo-version", "go.mod", "\tgithub.com/x/y v0.0.0-20240101000000-abcdef123456 // indirect", nil},
		{"exponent number", "a.go", "// in 1e999999 the exponent overflows", nil},
		{"word of hex letters only", "a.go", "// written in deadbeef", nil},

		// A figure's history.
		{"was then now", "a.md", "The limit was 400 MiB, now 300 MiB.", []string{RuleHistory}},
		{"was and is now", "a.go", "// p99 was 12 ms and is now 9 ms", []string{RuleHistory}},
		{"was without now", "a.go", "// the batch was 500 rows", nil},

		// Markdown documents the repository does not ship.
		{"unshipped bare name", "cmd/x/a.go", "// as kafka.md says", []string{RuleMarkdown}},
		{"shipped from the root", "cmd/x/a.go", "// as docs/kafka.md says", nil},
		{"shipped relative to the file", "docs/a.md", "see [kafka](kafka.md#topics)", nil},
		{"shipped relative, up a folder", "docs/design/a.md", "[perf](performance.md), [back](../kafka.md), [top](../../README.md)", nil},
		{"bare name only at the root", "docs/a.md", "see README.md and persister.md", []string{RuleMarkdown}},
		{"escaping the repository", "a.go", `// read ../README.md`, []string{RuleMarkdown}},
		{"a page's link, left to ScanLinks", "docs/a.md", "see [the flow](architecture.md#flow)", nil},
		{"a page's unlinked name", "docs/a.md", "see architecture.md", []string{RuleMarkdown}},
		{"a URL of another repository", "a.md", "[x](https://github.com/o/r/blob/main/CHANGELOG.md)", nil},
		{"a glob and a template", "Makefile", "git ls-files '*.md' docs/components/*.md %s.md {{.Name}}.md", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ScanWords(c.file, c.text, func(p string) bool { return shipped[p] })
			var rules []string
			for _, f := range got {
				rules = append(rules, f.Rule)
			}
			if strings.Join(rules, "|") != strings.Join(c.want, "|") {
				t.Errorf("ScanWords(%q, %q) = %+v, want rules %q", c.file, c.text, got, c.want)
			}
		})
	}
}

// A finding names the line it is on, counted from 1, so the report reads
// file:line.
func TestScanWordsLineNumbers(t *testing.T) {
	text := "package x\n\n// fine\n// as the spec says\n"
	got := ScanWords("x.go", text, func(string) bool { return false })
	if len(got) != 1 || got[0].Line != 4 || got[0].Match != "the spec" {
		t.Fatalf("got %+v, want one finding on line 4 matching %q", got, "the spec")
	}
	// Across a break, the finding is on the line where the phrase starts.
	got = ScanWords("x.go", "// a\n// in session\n// 7 and on", func(string) bool { return false })
	if len(got) != 1 || got[0].Line != 2 {
		t.Fatalf("got %+v, want one finding on line 2", got)
	}
}
