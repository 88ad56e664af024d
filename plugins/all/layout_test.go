package all

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// kinds maps the engine's registration functions to the component kind
// pipelines and docs name.
var kinds = map[string]string{
	"BatchInput": "input", "Input": "input",
	"BatchOutput": "output", "Output": "output",
	"BatchProcessor": "processor", "Processor": "processor",
	"MetricsExporter": "metrics", "OtelTracerProvider": "tracer",
}

// TestComponentTableMatchesTheCode holds the component table of
// docs/architecture.md to the components the plugins register: each one
// listed, in plugins/<name without underscores>/<kind>_<name>.go as the
// page's rule says, and no row for a component that no longer exists.
func TestComponentTableMatchesTheCode(t *testing.T) {
	reg := regexp.MustCompile(`service\.(?:Must)?Register(BatchInput|Input|BatchOutput|Output|BatchProcessor|Processor|MetricsExporter|OtelTracerProvider)\(\s*"([a-z0-9_]+)"`)
	var code []string
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range reg.FindAllStringSubmatch(string(b), -1) {
			kind, name := kinds[m[1]], m[2]
			file := filepath.ToSlash(filepath.Join("plugins", strings.TrimPrefix(filepath.ToSlash(path), "../")))
			dir := strings.ReplaceAll(name, "_", "")
			if want := "plugins/" + dir + "/" + kind + "_" + name + ".go"; file != want {
				t.Errorf("%s %s is registered in %s: by the layout rule it belongs in %s", kind, name, file, want)
			}
			code = append(code, "| `"+name+"` | "+kind+" | `"+file+"` |")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(code) == 0 {
		t.Fatal("found no component registrations under plugins/")
	}

	page, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash("docs/architecture.md")))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(page), "<!-- components:begin -->\n")
	table, _, ok2 := strings.Cut(table, "<!-- components:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/architecture.md lacks the <!-- components:begin --> … <!-- components:end --> markers")
	}
	var rows []string
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "| `") {
			// Name, kind and file: the reference link is the generated pages' business.
			cells := strings.SplitN(line, " | ", 4)
			if len(cells) < 3 {
				t.Errorf("docs/architecture.md: a component row with fewer than three cells: %s", line)
				continue
			}
			rows = append(rows, strings.Join(cells[:3], " | ")+" |")
		}
	}
	for _, c := range code {
		if !slices.Contains(rows, c) {
			t.Errorf("docs/architecture.md's component table lacks the row %s", c)
		}
	}
	for _, r := range rows {
		if !slices.Contains(code, r) {
			t.Errorf("docs/architecture.md's component table lists %s, which no plugin registers there", r)
		}
	}
}
