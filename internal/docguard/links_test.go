package docguard

import (
	"errors"
	"reflect"
	"sort"
	"testing"
)

// Each case is a page and the relative links it must yield: a link the
// scanner missed would never be checked.
func TestScanLinks(t *testing.T) {
	cases := []struct {
		name, text string
		want       []Link
	}{
		{"page and anchor", "See [kafka](kafka.md#topics).", []Link{{1, "kafka.md#topics", "kafka.md", "topics"}}},
		{"anchor in the page", "line\n[up](#alerts)", []Link{{2, "#alerts", "", "alerts"}}},
		{"image and title", `![flow](img/flow.png "the flow")`, []Link{{1, "img/flow.png", "img/flow.png", ""}}},
		{"angle brackets and escapes", "[x](<my%20page.md>)", []Link{{1, "my%20page.md", "my page.md", ""}}},
		{"reference definition", "[ops]: operations.md#alerts", []Link{{1, "operations.md#alerts", "operations.md", "alerts"}}},
		{"html link", `<a href="../plugins/ingestapi/openapi.json">spec</a>`, []Link{{1, "../plugins/ingestapi/openapi.json", "../plugins/ingestapi/openapi.json", ""}}},
		{"two on a line", "[a](a.md) and [b](b.md#c)", []Link{{1, "a.md", "a.md", ""}, {1, "b.md#c", "b.md", "c"}}},
		{"absolute urls", "[x](https://example.com/a.md) [m](mailto:a@b.c) <https://x.y>", nil},
		{"inside a fence", "```sh\n[x](missing.md)\n```\n[y](y.md)", []Link{{4, "y.md", "y.md", ""}}},
		{"inside a tilde fence", "~~~\n[x](missing.md)\n~~~", nil},
		{"inside a code span", "write `[x](missing.md)` in the page", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ScanLinks(c.text); !reflect.DeepEqual(got, c.want) {
				t.Errorf("ScanLinks(%q) = %+v, want %+v", c.text, got, c.want)
			}
		})
	}
}

// Slugs by GitHub's rules: a link built from them resolves on the code host.
func TestSlug(t *testing.T) {
	cases := map[string]string{
		"Alerts":                                "alerts",
		"SpeculaProDecisionEventsLost":          "speculaprodecisioneventslost",
		"Rotating the keys":                     "rotating-the-keys",
		"What `SP_DB_URL` does":                 "what-sp_db_url-does",
		"Topics, keys and groups":               "topics-keys-and-groups",
		"When Kafka is down (the decision row)": "when-kafka-is-down-the-decision-row",
		"Ingest → persist — the flow":           "ingest--persist--the-flow",
		"See [rules](rules.md) first":           "see-rules-first",
		"Dead letters: `.dlq` topics":           "dead-letters-dlq-topics",
		"Größe & Überblick":                     "größe--überblick",
		"  Trailing spaces  ":                   "trailing-spaces",
		"Using _emphasis_ here":                 "using-emphasis-here",
		"The __init__ hook, `__init__` too":     "the-init-hook-__init__-too",
		"Test knobs (SP_TEST_*)":                "test-knobs-sp_test_",
		"`tls.client_certs[].cert`":             "tlsclient_certscert",
	}
	for in, want := range cases {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// A page's anchors: every heading (ATX or setext, not inside a fence), the
// repeated ones numbered, and explicit <a id>/<a name>.
func TestAnchors(t *testing.T) {
	text := `# Kafka

## Topics
text
## Topics ##
### Topics
<a id="custom-id"></a>
<a name="old-name"></a>

Setext heading
--------------

` + "```sh\n# not a heading\n```" + `

| a | b |
| --- | --- |

text

---
`
	got := Anchors(text)
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := []string{"custom-id", "kafka", "old-name", "setext-heading", "topics", "topics-1", "topics-2"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("Anchors = %q, want %q", keys, want)
	}
}

// Each link of a page is held to the repository: a broken one must be
// caught with its reason, a good one must pass.
func TestResolve(t *testing.T) {
	files := map[string]string{
		"README.md":                      "# SpeculaPro\n## Quick start\n",
		"docs/kafka.md":                  "# Kafka\n## Topics\n### Topics\n",
		"docs/design/performance.md":     "# Performance\n",
		"plugins/ingestapi/openapi.json": "{}",
		"deploy/observability/a.yaml":    "",
	}
	dirs := map[string]bool{".": true, "docs": true, "docs/design": true, "plugins": true, "plugins/ingestapi": true, "deploy": true, "deploy/observability": true}
	repo := Repo{
		IsFile:  func(p string) bool { _, ok := files[p]; return ok },
		IsDir:   func(p string) bool { return dirs[p] },
		Anchors: func(p string) map[string]bool { return Anchors(files[p]) },
	}
	cases := []struct {
		name, page, dest string
		want             error
	}{
		{"a page", "docs/kafka.md", "design/performance.md", nil},
		{"a page and its heading", "docs/design/performance.md", "../kafka.md#topics", nil},
		{"a repeated heading", "docs/design/performance.md", "../kafka.md#topics-1", nil},
		{"a heading of the page itself", "docs/kafka.md", "#topics", nil},
		{"up to the root", "docs/kafka.md", "../README.md#quick-start", nil},
		{"from the root", "docs/kafka.md", "/plugins/ingestapi/openapi.json", nil},
		{"a JSON document's line", "README.md", "plugins/ingestapi/openapi.json#L3", nil},
		{"a folder", "docs/kafka.md", "../deploy/observability/", nil},
		{"a missing page", "docs/kafka.md", "persister.md", ErrNotShipped},
		{"a page named from the wrong folder", "docs/kafka.md", "docs/design/performance.md", ErrNotShipped},
		{"outside the repository", "README.md", "../elsewhere/x.md", ErrNotShipped},
		{"a missing heading", "README.md", "docs/kafka.md#partitions", ErrNoAnchor},
		{"a heading in the wrong case", "docs/kafka.md", "#Topics", ErrNoAnchor},
		{"a missing heading of the page itself", "README.md", "#licence", ErrNoAnchor},
		{"an anchor on a folder", "README.md", "docs/#kafka", ErrAnchorOnFolder},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			links := ScanLinks("[x](" + c.dest + ")")
			if len(links) != 1 {
				t.Fatalf("ScanLinks found %d links in %q", len(links), c.dest)
			}
			err := repo.Resolve(c.page, links[0])
			if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
				t.Errorf("Resolve(%s, %s) = %v, want %v", c.page, c.dest, err, c.want)
			}
		})
	}
}
