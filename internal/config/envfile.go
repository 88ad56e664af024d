package config

import (
	"fmt"
	"strings"
)

// EnvExample renders config/speculapro.env.example: every setting, commented
// out at its default, with when to change it. The file is generated from the
// list above (go test ./internal/config -update) so the two cannot drift.
func EnvExample() string {
	var b strings.Builder
	b.WriteString("# SpeculaPro settings. Every SP_* variable, at its default, with when to change it.\n")
	b.WriteString("# Generated from internal/config (go test ./internal/config -update); do not edit by hand.\n")
	for _, s := range All() {
		fmt.Fprintf(&b, "\n# %s\n", s.Help)
		if s.Default == "" {
			fmt.Fprintf(&b, "# %s=\n", s.Name)
		} else {
			fmt.Fprintf(&b, "# %s=%s\n", s.Name, s.Default)
		}
	}
	return b.String()
}

// MarkdownTable renders the settings table of docs/configuration.md. readBy
// names, per setting, what reads it (the pipelines, found by the caller in
// their YAML); a setting nobody in readBy names is read by commands only,
// as its help says.
func MarkdownTable(readBy map[string]string) string {
	var b strings.Builder
	b.WriteString("| Setting | Default | Read by | When to change it |\n| --- | --- | --- | --- |\n")
	for _, s := range All() {
		def := "(empty)"
		if s.Default != "" {
			def = "`" + s.Default + "`"
		}
		by := readBy[s.Name]
		if by == "" {
			by = "commands only"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.Name, def, by, s.Help)
	}
	return b.String()
}
