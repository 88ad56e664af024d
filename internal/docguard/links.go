package docguard

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
	"unicode"
)

// A Link is one link of a Markdown page: its 1-based line, the destination as
// written, and that destination split into path and anchor (either may be
// empty: "#anchor" links within the page).
type Link struct {
	Line   int
	Dest   string
	Path   string
	Anchor string
}

var (
	// fenceRe opens or closes a fenced code block.
	fenceRe = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	// inlineCode is a code span; a link inside one is text.
	inlineCode = regexp.MustCompile("(`+)[^`]*?`+")
	// inlineLink is the destination of [text](dest "title") and ![alt](src).
	inlineLink = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	// refDef is a reference definition: [label]: dest "title".
	refDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// refDefAll is refDef for every line of a text.
	refDefAll = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:[ \t]*(<[^>]*>|\S+)`)
	// htmlLink is the target of <a href> or <img src>.
	htmlLink = regexp.MustCompile(`(?i)<(?:a|img)\b[^>]*?\s(?:href|src)\s*=\s*["']([^"']*)["']`)
	// htmlAnchor is an explicit anchor: <a id="x"> or <a name="x">.
	htmlAnchor = regexp.MustCompile(`(?i)<a\b[^>]*?\s(?:id|name)\s*=\s*["']([^"']+)["']`)
	// atxHeading is "## Heading ##".
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}(?:\s+(.*?))?(?:\s+#+)?\s*$`)
	// setextUnderline turns the paragraph line above it into a heading.
	setextUnderline = regexp.MustCompile(`^ {0,3}(?:=+|-+)\s*$`)
	// schemeRe marks an absolute URL (http:, https:, mailto:, …).
	schemeRe = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// mdLinkText turns [text](dest) and ![alt](src) into text for slugs.
	mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	// htmlTag is any HTML tag, dropped from heading text.
	htmlTag = regexp.MustCompile(`<[^>]+>`)
	// underscoreEmphasis is _text_ or __text__ between word boundaries,
	// which renders without its underscores (inside a word they stay).
	underscoreEmphasis = regexp.MustCompile(`(^|[\s(])_{1,2}([^_\s](?:[^_]*[^_\s])?)_{1,2}([\s).,:;!?]|$)`)
	// codeSpan splits a heading into code spans and the text between.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
)

// proseLines returns the page's lines with fenced code blocks blanked, so
// that line numbers stay true and nothing inside a fence counts.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	out := make([]string, len(lines))
	fence := ""
	for i, l := range lines {
		if m := fenceRe.FindStringSubmatch(l); m != nil {
			switch {
			case fence == "":
				fence = m[1]
				continue
			case m[1][0] == fence[0] && len(m[1]) >= len(fence) && strings.TrimSpace(l[strings.Index(l, m[1])+len(m[1]):]) == "":
				fence = ""
				continue
			}
		}
		if fence == "" {
			out[i] = l
		}
	}
	return out
}

// ScanLinks returns every relative link of a Markdown page (absolute URLs,
// mailto: and the like are left out), outside fenced code blocks and code
// spans.
func ScanLinks(text string) []Link {
	var out []Link
	for i, l := range proseLines(text) {
		if l == "" {
			continue
		}
		l = inlineCode.ReplaceAllString(l, "")
		var dests []string
		if m := refDef.FindStringSubmatch(l); m != nil {
			dests = append(dests, m[1])
		}
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			dests = append(dests, m[1])
		}
		for _, m := range htmlLink.FindAllStringSubmatch(l, -1) {
			dests = append(dests, m[1])
		}
		for _, d := range dests {
			d = strings.TrimSuffix(strings.TrimPrefix(d, "<"), ">")
			if d == "" || schemeRe.MatchString(d) {
				continue
			}
			p, a, _ := strings.Cut(d, "#")
			if q := strings.IndexByte(p, '?'); q >= 0 {
				p = p[:q]
			}
			if u, err := url.PathUnescape(p); err == nil {
				p = u
			}
			out = append(out, Link{Line: i + 1, Dest: d, Path: p, Anchor: a})
		}
	}
	return out
}

// Anchors returns the anchors a Markdown page offers: one per heading, by
// GitHub's rules, and every explicit <a id> or <a name>.
func Anchors(text string) map[string]bool {
	lines := proseLines(text)
	out := map[string]bool{}
	seen := map[string]int{}
	add := func(heading string) {
		base := Slug(heading)
		s := base
		for n := seen[base]; ; n++ {
			if n > 0 {
				s = fmt.Sprintf("%s-%d", base, n)
			}
			if !out[s] {
				seen[base] = n + 1
				break
			}
		}
		out[s] = true
	}
	for i, l := range lines {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		if m := atxHeading.FindStringSubmatch(l); m != nil && strings.HasPrefix(strings.TrimLeft(l, " "), "#") {
			add(m[1])
			continue
		}
		// A setext heading: a paragraph line underlined with = or -. A table
		// row, a list item or a blank line above a rule is no heading.
		if i > 0 && setextUnderline.MatchString(l) {
			p := strings.TrimSpace(lines[i-1])
			if p != "" && !strings.HasPrefix(p, "|") && !strings.HasPrefix(p, "#") &&
				!strings.HasPrefix(p, "- ") && !strings.HasPrefix(p, "* ") &&
				(i < 2 || strings.TrimSpace(lines[i-2]) == "") {
				add(p)
			}
		}
	}
	return out
}

// outsideCode applies f to the parts of s that are not code spans.
func outsideCode(s string, f func(string) string) string {
	var b strings.Builder
	last := 0
	for _, loc := range codeSpan.FindAllStringIndex(s, -1) {
		b.WriteString(f(s[last:loc[0]]))
		b.WriteString(s[loc[0]:loc[1]])
		last = loc[1]
	}
	b.WriteString(f(s[last:]))
	return b.String()
}

// Slug is the anchor GitHub gives a heading: the text as rendered (link
// targets, code backticks and HTML tags gone), lower-cased, with every
// character but letters, digits, marks, '-', '_' and spaces dropped and each
// space turned into '-'.
func Slug(heading string) string {
	h := mdLinkText.ReplaceAllString(heading, "$1")
	h = htmlTag.ReplaceAllString(h, "")
	h = outsideCode(h, func(s string) string { return underscoreEmphasis.ReplaceAllString(s, "$1$2$3") })
	h = strings.TrimSpace(h)
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Repo is what Resolve needs to know of the repository: its files and
// folders (slash paths from the root) and a page's anchors.
type Repo struct {
	IsFile  func(string) bool
	IsDir   func(string) bool
	Anchors func(page string) map[string]bool
}

// Errors of Resolve.
var (
	ErrNotShipped     = errors.New("is not a tracked file")
	ErrNoAnchor       = errors.New("has no heading or <a id> with that anchor")
	ErrAnchorOnFolder = errors.New("an anchor on a folder")
)

// Resolve checks a link of page (a slash path from the root): its path must
// be a file or folder of the repository, relative to the page (or to the
// root when it starts with /), and its anchor, on a Markdown page, one the
// page offers. An anchor into another kind of file (a line of a JSON
// document) is not checked.
func (r Repo) Resolve(page string, l Link) error {
	target := page
	if l.Path != "" {
		if strings.HasPrefix(l.Path, "/") {
			target = path.Clean(strings.TrimPrefix(l.Path, "/"))
		} else {
			target = path.Join(path.Dir(page), l.Path)
		}
		switch {
		case target == ".." || strings.HasPrefix(target, "../"):
			return fmt.Errorf("%s: %w (outside the repository)", target, ErrNotShipped)
		case r.IsDir(target):
			if l.Anchor != "" {
				return fmt.Errorf("%s: %w", target, ErrAnchorOnFolder)
			}
			return nil
		case !r.IsFile(target):
			return fmt.Errorf("%s %w", target, ErrNotShipped)
		}
	}
	if l.Anchor == "" || !strings.HasSuffix(strings.ToLower(target), ".md") {
		return nil
	}
	if !r.Anchors(target)[l.Anchor] {
		return fmt.Errorf("%s %w: #%s", target, ErrNoAnchor, l.Anchor)
	}
	return nil
}
