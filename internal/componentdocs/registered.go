package componentdocs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// servicePath is the engine package whose Register functions add a component
// to the global environment that the binary runs with.
const servicePath = "github.com/redpanda-data/benthos/v4/public/service"

// Kind is a component's kind as the engine names it in a config: the key the
// component sits under (input, output, metrics, tracer) or, for processors,
// caches, rate limits, buffers and scanners, the kind of its list or map.
type Kind string

const (
	KindInput     Kind = "input"
	KindProcessor Kind = "processor"
	KindOutput    Kind = "output"
	KindMetrics   Kind = "metrics"
	KindTracer    Kind = "tracer"
	KindCache     Kind = "cache"
	KindRateLimit Kind = "rate_limit"
	KindBuffer    Kind = "buffer"
	KindScanner   Kind = "scanner"
)

// kindOrder is the order of the index: a pipeline's order first, then the
// service-wide components, then the rest.
var kindOrder = []Kind{KindInput, KindBuffer, KindProcessor, KindOutput, KindMetrics, KindTracer, KindCache, KindRateLimit, KindScanner}

// Dir is the directory of docs/components/ that holds pages of this kind, named
// as Redpanda Connect names its own.
func (k Kind) Dir() string {
	switch k {
	case KindMetrics:
		return "metrics"
	default:
		return string(k) + "s"
	}
}

// registerKinds maps the engine's Register functions (without their Must
// prefix) to the kind of component they register.
var registerKinds = map[string]Kind{
	"RegisterInput":               KindInput,
	"RegisterBatchInput":          KindInput,
	"RegisterProcessor":           KindProcessor,
	"RegisterBatchProcessor":      KindProcessor,
	"RegisterOutput":              KindOutput,
	"RegisterBatchOutput":         KindOutput,
	"RegisterMetricsExporter":     KindMetrics,
	"RegisterOtelTracerProvider":  KindTracer,
	"RegisterCache":               KindCache,
	"RegisterRateLimit":           KindRateLimit,
	"RegisterBatchBuffer":         KindBuffer,
	"RegisterBatchScannerCreator": KindScanner,
}

// Component is one component our code registers.
type Component struct {
	Kind Kind
	Name string
	// Source is the file that registers it, slash-separated and relative to
	// the module root, so a page can say where its spec lives.
	Source string
}

// Registered lists the components that the non-test Go code under root
// registers with the engine's package-level Register functions, in index
// order. A registration it cannot read (a name that is not a string constant
// of the package, a template) is an error rather than a page left out.
func Registered(root string) ([]Component, error) {
	dirs := map[string][]string{} // directory → its non-test Go files
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	var out []Component
	seen := map[Component]string{}
	for _, files := range dirs {
		comps, err := registeredIn(root, files)
		if err != nil {
			return nil, err
		}
		for _, c := range comps {
			key := Component{Kind: c.Kind, Name: c.Name}
			if prev, ok := seen[key]; ok {
				return nil, fmt.Errorf("%s %q is registered twice, in %s and %s", c.Kind, c.Name, prev, c.Source)
			}
			seen[key] = c.Source
			out = append(out, c)
		}
	}
	sortComponents(out)
	return out, nil
}

// registeredIn reads one package's files: its string constants first, so a
// registration may name its component with one, then its Register calls.
func registeredIn(root string, files []string) ([]Component, error) {
	fset := token.NewFileSet()
	parsed := make([]*ast.File, 0, len(files))
	consts := map[string]string{}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse: %w", err)
		}
		parsed = append(parsed, f)
		addStringConsts(consts, f)
	}
	var out []Component
	for _, f := range parsed {
		svc := importName(f, servicePath)
		if svc == "" {
			continue
		}
		rel, err := filepath.Rel(root, fset.File(f.Pos()).Name())
		if err != nil {
			return nil, err
		}
		rel = filepath.ToSlash(rel)
		var bad error
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || bad != nil {
				return bad == nil
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != svc {
				return true
			}
			fn := strings.TrimPrefix(sel.Sel.Name, "Must")
			if fn == "RegisterTemplateYAML" {
				bad = fmt.Errorf("%s: a template component is registered, and componentdocs does not document templates yet", fset.Position(call.Pos()))
				return false
			}
			kind, ok := registerKinds[fn]
			if !ok {
				return true
			}
			name, ok := "", len(call.Args) > 0
			if ok {
				name, ok = stringLit(call.Args[0])
				if id, isIdent := call.Args[0].(*ast.Ident); !ok && isIdent {
					name, ok = consts[id.Name]
				}
			}
			if !ok {
				bad = fmt.Errorf("%s: %s.%s names its component with something other than a string constant of its package, so its page cannot be generated", fset.Position(call.Pos()), svc, sel.Sel.Name)
				return false
			}
			out = append(out, Component{Kind: kind, Name: name, Source: rel})
			return true
		})
		if bad != nil {
			return nil, bad
		}
	}
	return out, nil
}

// addStringConsts adds the string constants f declares at top level to
// consts, by name.
func addStringConsts(consts map[string]string, f *ast.File) {
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if s, ok := stringLit(vs.Values[i]); ok {
						consts[name.Name] = s
					}
				}
			}
		}
	}
}

// importName is the name file f refers to the package at path by, or "" when
// f does not import it.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, err := strconv.Unquote(imp.Path.Value); err != nil || p != path {
			continue
		}
		if imp.Name != nil {
			if imp.Name.Name == "_" || imp.Name.Name == "." {
				return ""
			}
			return imp.Name.Name
		}
		return path[strings.LastIndex(path, "/")+1:]
	}
	return ""
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

func sortComponents(cs []Component) {
	rank := map[Kind]int{}
	for i, k := range kindOrder {
		rank[k] = i
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].Kind != cs[j].Kind {
			return rank[cs[i].Kind] < rank[cs[j].Kind]
		}
		return cs[i].Name < cs[j].Name
	})
}
