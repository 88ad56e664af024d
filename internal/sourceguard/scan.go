package sourceguard

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strings"
)

// The limits a non-test Go file and a function are held to.
const (
	MaxFileLines = 600
	MaxFuncLines = 80
)

// The kinds of Finding.
const (
	KindFile = "file"
	KindFunc = "func"
)

// ReasonPrefix starts the comment line that keeps a long function: the rest of
// the line says why splitting it would hurt.
const ReasonPrefix = "long:"

// minReasonWords is how many words a reason needs: enough to say why, so a
// placeholder ("long: yes", "long: TODO") does not pass.
const minReasonWords = 3

// Finding is one file or function over its limit.
type Finding struct {
	Kind  string // KindFile or KindFunc
	Name  string // the function as a reader finds it: Name, T.Name, (*T).Name, or var x for a literal; empty for a file
	Line  int    // where it starts
	Lines int    // how long it is
	// Reason is set when the function carries a malformed reason (too short),
	// so the message can say what is wrong with it.
	Reason string
}

func (f Finding) String() string {
	if f.Kind == KindFile {
		return fmt.Sprintf("file has %d lines (limit %d)", f.Lines, MaxFileLines)
	}
	msg := fmt.Sprintf("%s has %d lines (limit %d)", f.Name, f.Lines, MaxFuncLines)
	if f.Reason != "" {
		msg += fmt.Sprintf("; its reason %q needs at least %d words", f.Reason, minReasonWords)
	}
	return msg
}

// Scan returns the limits one Go file breaks. A generated file breaks none.
// A function over MaxFuncLines is kept when the comment block ending on the
// line above it holds a "// long: <reason>" line (see the package doc).
// Functions are top-level functions and methods, and function literals in
// top-level declarations (a literal inside a function counts toward that
// function).
func Scan(filename string, src []byte) ([]Finding, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, filename, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", filename, err)
	}
	if ast.IsGenerated(file) {
		return nil, nil
	}
	var out []Finding
	if n := countLines(src); n > MaxFileLines {
		out = append(out, Finding{Kind: KindFile, Line: 1, Lines: n})
	}
	// commentsEndingAt finds the comment block directly above a line.
	commentsEndingAt := map[int]*ast.CommentGroup{}
	for _, g := range file.Comments {
		commentsEndingAt[fset.Position(g.End()).Line] = g
	}
	check := func(name string, start, end token.Pos) {
		first, last := fset.Position(start).Line, fset.Position(end).Line
		n := last - first + 1
		if n <= MaxFuncLines {
			return
		}
		reason, found := reasonIn(commentsEndingAt[first-1])
		if found && words(reason) >= minReasonWords {
			return
		}
		out = append(out, Finding{Kind: KindFunc, Name: name, Line: first, Lines: n, Reason: reason})
	}
	for _, d := range file.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			check(funcName(d), d.Pos(), d.End())
		case *ast.GenDecl:
			for _, s := range d.Specs {
				name := "func literal in " + specName(d.Tok, s)
				ast.Inspect(s, func(n ast.Node) bool {
					lit, ok := n.(*ast.FuncLit)
					if !ok {
						return true
					}
					check(name, lit.Pos(), lit.End())
					return false
				})
			}
		}
	}
	return out, nil
}

// reasonLine matches the reason's line inside a comment block.
var reasonLine = regexp.MustCompile(`^//\s*` + regexp.QuoteMeta(ReasonPrefix) + `(.*)$`)

// reasonIn returns the reason a comment block gives, and whether it has a
// reason line at all (an empty or short reason is found but not enough).
func reasonIn(g *ast.CommentGroup) (string, bool) {
	if g == nil {
		return "", false
	}
	for _, c := range g.List {
		if m := reasonLine.FindStringSubmatch(c.Text); m != nil {
			return strings.TrimSpace(m[1]), true
		}
	}
	return "", false
}

// words counts the words of a reason: runs of text holding a letter.
func words(s string) int {
	n := 0
	for _, w := range strings.Fields(s) {
		if strings.IndexFunc(w, isLetter) >= 0 {
			n++
		}
	}
	return n
}

func isLetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > 0x7f }

// countLines counts lines as wc -l does, plus a last line without a newline.
func countLines(src []byte) int {
	n := bytes.Count(src, []byte("\n"))
	if len(src) > 0 && src[len(src)-1] != '\n' {
		n++
	}
	return n
}

// funcName names a function or method as a reader finds it in the file.
func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	return recvName(d.Recv.List[0].Type) + "." + d.Name.Name
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return "(*" + recvName(t.X) + ")"
	case *ast.IndexExpr: // a generic receiver T[K]
		return recvName(t.X)
	case *ast.IndexListExpr: // T[K, V]
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// specName names a top-level declaration by its first name.
func specName(tok token.Token, s ast.Spec) string {
	switch s := s.(type) {
	case *ast.ValueSpec:
		if len(s.Names) > 0 {
			return tok.String() + " " + s.Names[0].Name
		}
	case *ast.TypeSpec:
		return "type " + s.Name.Name
	}
	return tok.String()
}
