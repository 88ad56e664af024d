package config

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite config/speculapro.env.example and the README's settings table")

const (
	envExamplePath = "../../config/speculapro.env.example"
	readmePath     = "../../README.md"
	tableBegin     = "<!-- settings:begin -->\n"
	tableEnd       = "<!-- settings:end -->"
)

// Users configure from the example file and the README; both must list every
// setting with the default the code really uses.
func TestDocumentsListEverySetting(t *testing.T) {
	if *update {
		if err := os.WriteFile(envExamplePath, []byte(EnvExample()), 0o644); err != nil {
			t.Fatal(err)
		}
		readme, err := os.ReadFile(readmePath)
		if err != nil {
			t.Fatal(err)
		}
		s := string(readme)
		i, j := strings.Index(s, tableBegin), strings.Index(s, tableEnd)
		if i < 0 || j < i {
			t.Fatalf("README.md lacks the %q … %q markers", tableBegin, tableEnd)
		}
		s = s[:i+len(tableBegin)] + MarkdownTable() + s[j:]
		if err := os.WriteFile(readmePath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(envExamplePath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != EnvExample() {
		t.Errorf("%s is out of date: run go test ./internal/config -update", envExamplePath)
	}
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), MarkdownTable()) {
		t.Errorf("README.md settings table is out of date: run go test ./internal/config -update")
	}
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
