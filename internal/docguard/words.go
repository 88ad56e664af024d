package docguard

import (
	"path"
	"regexp"
	"strings"
	"unicode"
)

// A Finding is one forbidden use in a file: its 1-based line, the rule it
// breaks and the offending text.
type Finding struct {
	Line  int
	Rule  string
	Match string
}

// Rule names, as findings and the allow-list spell them.
const (
	RuleSession  = "numbered session"
	RuleIssue    = "issue number"
	RuleTheIssue = "reference to an unnamed issue"
	RuleTheSpec  = "specification cited instead of explained"
	RuleShared   = "shared folder outside the repository"
	RuleHash     = "commit hash as an explanation"
	RuleHistory  = "history of a figure"
	RuleMarkdown = "Markdown document the repository does not ship"
)

// wordRules are the rules that need nothing but the text. Each may match
// across a line break of a comment or paragraph, which ScanWords also looks
// at.
var wordRules = []struct {
	name string
	re   *regexp.Regexp
}{
	{RuleSession, regexp.MustCompile(`(?i)\bsessions?\s*#?\s*\d+(?:\s*[-–—]\s*\d+)?\b`)},
	// An issue's numbered item, "item" and its number in parentheses, is an
	// issue number too.
	{RuleIssue, regexp.MustCompile(`(?i)\bissues?\s*#\s*\d+\b|\bissues?\s+\d+\b|\(items?\s+\d+\)`)},
	{RuleTheIssue, regexp.MustCompile(`(?i)\bthe\s+issues?\b|\(issues?\)`)},
	{RuleTheSpec, regexp.MustCompile(`(?i)\bthe\s+specs?\b|\b(?:persister|kafka|product|ingestion)\s+specs?\b|(?-i:\bspec(?:'s)?\s+(?:says|promises|quotes|words|recommends|advises|allows|asks|describes)\b)`)},
	{RuleShared, regexp.MustCompile(`(?:\.\./)+shared\b|/work/(?:shared)\b`)},
	{RuleHistory, regexp.MustCompile(`(?i)\bwas\s+[~≈]?\d[\d.,]*\s*[^\s.;,]*[,;]?\s+(?:and\s+)?(?:is\s+)?now\s+[~≈]?\d`)},
}

// hexWord is a word of 7 to 40 lower-case hex digits: the shape of a commit
// hash, abbreviated or not. Whether it is one depends on what surrounds it.
var hexWord = regexp.MustCompile(`[0-9a-f]{7,40}`)

// floatWord is a number in exponent form (1e999999), which hexWord also
// matches.
var floatWord = regexp.MustCompile(`^\d+e\d+$`)

// hashLeadIns are the words after which a hex word is a commit given as a
// reason ("since", "at main", "before", …).
var hashLeadIns = map[string]bool{
	"commit": true, "commits": true, "since": true, "at": true, "on": true, "in": true,
	"main": true, "before": true, "after": true, "until": true, "from": true, "revert": true,
}

// mdRef is a path or name ending in .md; URLs are removed before it runs.
var mdRef = regexp.MustCompile(`[\w./-]*[\w-]\.md\b`)

// urlRe matches a URL, whose path may name a Markdown file of another
// repository.
var urlRe = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s)>\]"'` + "`" + `]+`)

// ScanWords returns the forbidden uses in the file at file (a slash path
// relative to the repository root) with content text. shipped reports whether
// a slash path relative to the root is a file the repository ships; a
// Markdown name counts as shipped when it resolves to one from the file's
// own directory or from the root.
func ScanWords(file, text string, shipped func(string) bool) []Finding {
	lines := strings.Split(text, "\n")
	prose := make([]string, len(lines))
	for i, l := range lines {
		prose[i] = stripCommentMarker(l)
	}
	var out []Finding
	for i, l := range lines {
		n := i + 1
		for _, r := range wordRules {
			for _, m := range r.re.FindAllString(l, -1) {
				out = append(out, Finding{n, r.name, m})
			}
		}
		for _, m := range hashes(l) {
			out = append(out, Finding{n, RuleHash, m})
		}
		for _, m := range markdownRefs(file, l, shipped) {
			out = append(out, Finding{n, RuleMarkdown, m})
		}
		// A phrase broken over two lines of prose: look at the end of this
		// line joined to the start of the next, and keep only matches that
		// straddle the join (the others were found line by line).
		if i+1 < len(lines) {
			a, b := prose[i], prose[i+1]
			if a == "" || b == "" {
				continue
			}
			joined := a + " " + b
			for _, r := range wordRules {
				for _, loc := range r.re.FindAllStringIndex(joined, -1) {
					if loc[0] < len(a) && loc[1] > len(a)+1 {
						out = append(out, Finding{n, r.name, joined[loc[0]:loc[1]]})
					}
				}
			}
		}
	}
	return out
}

// stripCommentMarker returns a line without its indentation and its leading
// comment or quote marker (//, #, --, *, >), for joining lines of prose.
func stripCommentMarker(l string) string {
	l = strings.TrimSpace(l)
	for _, p := range []string{"//", "#", "--", "*", ">"} {
		if strings.HasPrefix(l, p) {
			l = strings.TrimSpace(strings.TrimLeft(l, p[:1]))
			break
		}
	}
	return l
}

// hashes returns the hex words of l that read as commit hashes given as a
// reason: after a lead-in word, alone in parentheses, or alone in backticks.
func hashes(l string) []string {
	var out []string
	for _, loc := range hexWord.FindAllStringIndex(l, -1) {
		w := l[loc[0]:loc[1]]
		if !strings.ContainsAny(w, "0123456789") || !strings.ContainsAny(w, "abcdef") || floatWord.MatchString(w) {
			continue
		}
		before, after := l[:loc[0]], l[loc[1]:]
		// Part of a longer word, a version, a UUID, a path or a digest.
		if prev, ok := lastRune(before); ok && (isWordRune(prev) || strings.ContainsRune("-_./:@#", prev)) {
			continue
		}
		if next, ok := firstRune(after); ok && (isWordRune(next) || strings.ContainsRune("-_/@", next)) {
			continue
		}
		switch {
		case strings.HasSuffix(before, "`") && strings.HasPrefix(after, "`"):
		case strings.HasSuffix(before, "(") && (strings.HasPrefix(after, ")") || strings.HasPrefix(after, ",")):
		case hashLeadIns[strings.ToLower(lastWord(before))]:
		default:
			continue
		}
		out = append(out, w)
	}
	return out
}

// lastWord is the last run of letters in s, ignoring what follows it.
func lastWord(s string) string {
	s = strings.TrimRightFunc(s, func(r rune) bool { return !unicode.IsLetter(r) })
	i := strings.LastIndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) })
	return s[i+1:]
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func lastRune(s string) (rune, bool) {
	if s == "" {
		return 0, false
	}
	r := []rune(s)
	return r[len(r)-1], true
}

func firstRune(s string) (rune, bool) {
	for _, r := range s {
		return r, true
	}
	return 0, false
}

// markdownRefs returns the Markdown documents l names that file cannot reach:
// a name counts when it is a shipped file relative to file's directory or to
// the repository root.
func markdownRefs(file, l string, shipped func(string) bool) []string {
	l = urlRe.ReplaceAllString(l, " ")
	// A page's links are ScanLinks' to check, anchors and all.
	if strings.HasSuffix(strings.ToLower(file), ".md") {
		l = inlineLink.ReplaceAllString(l, "]()")
		l = refDef.ReplaceAllString(l, "")
	}
	var out []string
	for _, loc := range mdRef.FindAllStringIndex(l, -1) {
		// A pattern or a template, not a name: *.md, %s.md, {{.Name}}.md, $page.md.
		if prev, ok := lastRune(l[:loc[0]]); ok && strings.ContainsRune("*%}$", prev) {
			continue
		}
		ref := l[loc[0]:loc[1]]
		if !resolves(file, ref, shipped) {
			out = append(out, ref)
		}
	}
	return out
}

// resolves reports whether ref, named in file, is a shipped file relative to
// file's directory or to the repository root.
func resolves(file, ref string, shipped func(string) bool) bool {
	for _, base := range []string{path.Dir(file), "."} {
		p := path.Join(base, ref)
		if !strings.HasPrefix(p, "../") && shipped(p) {
			return true
		}
	}
	return false
}
