package config

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite config/speculapro.env.example and the settings table of docs/configuration.md")

const (
	envExamplePath = "../../config/speculapro.env.example"
	configDocPath  = "../../docs/configuration.md"
	tableBegin     = "<!-- settings:begin -->\n"
	tableEnd       = "<!-- settings:end -->"
)

// Users configure from the example file and docs/configuration.md; both must
// list every setting with the default the code really uses, and the page
// says which pipelines read each.
func TestDocumentsListEverySetting(t *testing.T) {
	table := MarkdownTable(readers(t))
	if *update {
		if err := os.WriteFile(envExamplePath, []byte(EnvExample()), 0o644); err != nil {
			t.Fatal(err)
		}
		doc, err := os.ReadFile(configDocPath)
		if err != nil {
			t.Fatal(err)
		}
		s := string(doc)
		i, j := strings.Index(s, tableBegin), strings.Index(s, tableEnd)
		if i < 0 || j < i {
			t.Fatalf("%s lacks the %q … %q markers", configDocPath, tableBegin, tableEnd)
		}
		s = s[:i+len(tableBegin)] + table + s[j:]
		if err := os.WriteFile(configDocPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(envExamplePath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != EnvExample() {
		t.Errorf("%s is out of date: run make docs", envExamplePath)
	}
	doc, err := os.ReadFile(configDocPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), table) {
		t.Errorf("the settings table of %s is out of date: run make docs", configDocPath)
	}
}

// everyRole are the settings the binary itself reads for every pipeline it
// runs (cmd/speculapro/main.go: the HTTP server's address and the log level),
// whatever the pipeline's YAML says.
var everyRole = map[string]bool{HTTPAddr.Name: true, LogLevel.Name: true}

// readers names, per setting, the pipelines whose YAML reads it through
// ${NAME…}, as the settings table shows them.
func readers(t *testing.T) map[string]string {
	t.Helper()
	re := regexp.MustCompile(`\$\{(SP_[A-Z0-9_]+)`)
	by := map[string][]string{}
	for f, b := range pipelineYAML(t) {
		if filepath.Base(filepath.Dir(f)) != "pipelines" || strings.HasSuffix(f, "_benthos_test.yaml") {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		for _, m := range re.FindAllStringSubmatch(b, -1) {
			if !slices.Contains(by[m[1]], name) {
				by[m[1]] = append(by[m[1]], name)
			}
		}
	}
	out := map[string]string{}
	for _, s := range All() {
		if everyRole[s.Name] {
			out[s.Name] = "every role"
			continue
		}
		names := slices.Sorted(slices.Values(by[s.Name]))
		for i, n := range names {
			names[i] = "`" + n + "`"
		}
		out[s.Name] = strings.Join(names, ", ")
	}
	return out
}

// Every SP_* name used anywhere in the code, pipelines or scripts must be a
// documented setting (SP_TEST_* are test switches, not settings).
func TestNoUndocumentedSettings(t *testing.T) {
	known := map[string]bool{}
	for _, s := range All() {
		known[s.Name] = true
	}
	re := regexp.MustCompile(`\bSP_[A-Z0-9_]*[A-Z0-9]\b`)
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".cache", ".speculapro", "bin", ".run":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".yaml", ".yml", ".sh":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, name := range re.FindAllString(string(b), -1) {
			if !known[name] && !strings.HasPrefix(name, "SP_TEST_") {
				t.Errorf("%s uses %s, which internal/config does not list", path, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A pipeline's ${NAME:default} must default to what the code and the docs say,
// or `speculapro run` and `speculapro dev` would behave differently.
func TestPipelinesUseDocumentedDefaults(t *testing.T) {
	defaults := map[string]string{}
	for _, s := range All() {
		defaults[s.Name] = s.Default
	}
	re := regexp.MustCompile(`\$\{(SP_[A-Z0-9_]+)(?::([^}]*))?\}`)
	for f, b := range pipelineYAML(t) {
		for _, m := range re.FindAllStringSubmatch(b, -1) {
			want, ok := defaults[m[1]]
			if !ok || strings.HasPrefix(m[1], "SP_TEST_") {
				continue // reported by TestNoUndocumentedSettings
			}
			if m[2] != want {
				t.Errorf("%s: ${%s:%s} defaults to %q, the documented default is %q", f, m[1], m[2], m[2], want)
			}
		}
	}
}

// The engine substitutes ${…} into the YAML text before parsing it, so an
// unquoted key, password or prefix that happens to look like a number (a
// fingerprint key of only digits) reaches the plugin as a float and the role
// refuses to start with a message about numbers, not about the setting.
func TestPipelinesQuoteTextSettings(t *testing.T) {
	text := `SP_(ENCRYPTION_KEY|FINGERPRINT_KEY|KAFKA_USERNAME|KAFKA_PASSWORD|KAFKA_SASL_MECHANISM|REDIS_KEY_PREFIX|DECISION_SPOOL_PREFIX)`
	re := regexp.MustCompile(`(?m)(?:^\s*[A-Za-z_]+:|[\[{,])\s*\$\{` + text + `[:}]`)
	for f, b := range pipelineYAML(t) {
		for _, m := range re.FindAllString(b, -1) {
			t.Errorf("%s: %q: quote it (\"${…}\"), or a value that looks like a number is not a string", f, strings.TrimSpace(m))
		}
	}
}

// pipelineYAML is every file the engine interpolates settings into: the
// pipelines and the root configs beside them, by path.
func pipelineYAML(t *testing.T) map[string]string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("..", "..", "pipelines", "*.yaml"))
	more, _ := filepath.Glob(filepath.Join("..", "..", "config", "*.yaml"))
	out := map[string]string{}
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = string(b)
	}
	return out
}
