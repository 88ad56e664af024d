package docguard

import (
	"path"
	"regexp"
	"sort"
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

// wordRules are the rules that need nothing but the text. They run over the
// whole file with comment markers blanked (normalise), so a phrase broken
// over two lines of a comment or paragraph is found too. A rule runs only on
// a file holding one of its keywords (lower-case), which keeps the guard
// fast.
var wordRules = []struct {
	name     string
	keywords []string
	re       *regexp.Regexp
}{
	{RuleSession, []string{"session"}, regexp.MustCompile(`(?i)\bsessions?\s*#?\s*\d+(?:\s*[-–—]\s*\d+)?\b`)},
	// An issue's numbered item, "item" and its number in parentheses, is an
	// issue number too.
	{RuleIssue, []string{"issue", "item"}, regexp.MustCompile(`(?i)\bissues?\s*#\s*\d+\b|\bissues?\s+\d+\b|\(items?\s+\d+\)`)},
	{RuleTheIssue, []string{"issue"}, regexp.MustCompile(`(?i)\bthe\s+issues?\b|\(issues?\)`)},
	{RuleTheSpec, []string{"spec"}, regexp.MustCompile(`(?i)\bthe\s+specs?\b|\b(?:persister|kafka|product|ingestion)\s+specs?\b|(?-i:\bspec(?:'s)?\s+(?:says|promises|quotes|words|recommends|advises|allows|asks|describes)\b)`)},
	{RuleShared, []string{"shared"}, regexp.MustCompile(`(?:\.\./)+shared\b|/work/(?:shared)\b`)},
	{RuleHistory, []string{"now"}, regexp.MustCompile(`(?i)\bwas\s+[~≈]?\d[\d.,]*\s*[^\s.;,]*[,;]?\s+(?:and\s+)?(?:is\s+)?now\s+[~≈]?\d`)},
}

// hashLeadIns are the words after which a hex word is a commit given as a
// reason ("since", "at main", "before", …).
var hashLeadIns = map[string]bool{
	"commit": true, "commits": true, "since": true, "at": true, "on": true, "in": true,
	"main": true, "before": true, "after": true, "until": true, "from": true, "revert": true,
}

// floatWord is a number in exponent form (1e999999), which has the shape of
// a hex word.
var floatWord = regexp.MustCompile(`^\d+e\d+$`)

// mdRef is a path or name ending in .md.
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
	lines := lineStarts(text)
	lower := strings.ToLower(text)
	norm := normalise(text)
	var out []Finding
	for _, r := range wordRules {
		if !containsAny(lower, r.keywords) {
			continue
		}
		for _, loc := range r.re.FindAllStringIndex(norm, -1) {
			out = append(out, Finding{lineOf(lines, loc[0]), r.name, strings.Join(strings.Fields(norm[loc[0]:loc[1]]), " ")})
		}
	}
	for _, loc := range hashes(text) {
		out = append(out, Finding{lineOf(lines, loc[0]), RuleHash, text[loc[0]:loc[1]]})
	}
	if strings.Contains(lower, ".md") {
		for _, loc := range markdownRefs(file, text, shipped) {
			out = append(out, Finding{lineOf(lines, loc[0]), RuleMarkdown, text[loc[0]:loc[1]]})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// lineStarts are the offsets at which text's lines start.
func lineStarts(text string) []int {
	starts := []int{0}
	for i := 0; i < len(text); i++ {
		if text[i] == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// lineOf is the 1-based line of offset off.
func lineOf(starts []int, off int) int {
	return sort.Search(len(starts), func(i int) bool { return starts[i] > off })
}

// normalise returns text with each line's leading comment or quote marker
// (//, #, --, *, >) turned into spaces, byte for byte, so that offsets stay
// true and a phrase continued on the next line of a comment reads as one.
func normalise(text string) string {
	b := []byte(text)
	for i := 0; i < len(b); {
		j := i
		for j < len(b) && (b[j] == ' ' || b[j] == '\t') {
			j++
		}
		if j < len(b) {
			switch c := b[j]; {
			case c == '/' && j+1 < len(b) && b[j+1] == '/', c == '-' && j+1 < len(b) && b[j+1] == '-', c == '#', c == '*', c == '>':
				for j < len(b) && b[j] == c {
					b[j] = ' '
					j++
				}
			}
		}
		for i = j; i < len(b) && b[i] != '\n'; i++ {
		}
		i++
	}
	return string(b)
}

// hashes returns the spans of text's hex words that read as commit hashes
// given as a reason: after a lead-in word, alone in parentheses, or alone
// in backticks.
func hashes(text string) [][2]int {
	var out [][2]int
	for i := 0; i < len(text); {
		if !isHex(text[i]) {
			i++
			continue
		}
		j := i
		digit, letter := false, false
		for j < len(text) && isHex(text[j]) {
			if text[j] <= '9' {
				digit = true
			} else {
				letter = true
			}
			j++
		}
		start, end := i, j
		i = j
		if n := end - start; n < 7 || n > 40 || !digit || !letter || floatWord.MatchString(text[start:end]) {
			continue
		}
		lineStart := strings.LastIndexByte(text[:start], '\n') + 1
		before, after := text[lineStart:start], text[end:]
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
		out = append(out, [2]int{start, end})
	}
	return out
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

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

// markdownRefs returns the spans of the Markdown documents text names that
// file cannot reach: a name counts when it is a shipped file relative to
// file's directory or to the repository root. A URL's path is another
// repository's, and a page's link destinations are ScanLinks' to check.
func markdownRefs(file, text string, shipped func(string) bool) [][2]int {
	skip := urlRe.FindAllStringIndex(text, -1)
	if strings.HasSuffix(strings.ToLower(file), ".md") {
		for _, m := range inlineLink.FindAllStringSubmatchIndex(text, -1) {
			skip = append(skip, m[2:4])
		}
		skip = append(skip, refDefAll.FindAllStringIndex(text, -1)...)
	}
	inSkip := func(off int) bool {
		for _, s := range skip {
			if off >= s[0] && off < s[1] {
				return true
			}
		}
		return false
	}
	var out [][2]int
	for _, loc := range mdRef.FindAllStringIndex(text, -1) {
		// A pattern or a template, not a name: *.md, %s.md, {{.Name}}.md, $page.md.
		if prev, ok := lastRune(text[:loc[0]]); ok && strings.ContainsRune("*%}$", prev) {
			continue
		}
		if inSkip(loc[0]) || resolves(file, text[loc[0]:loc[1]], shipped) {
			continue
		}
		out = append(out, [2]int{loc[0], loc[1]})
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
