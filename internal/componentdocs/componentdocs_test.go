package componentdocs

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"

	// The components the binary ships: the global environment of this test
	// holds what `speculapro` holds.
	_ "github.com/speculapro/speculapro/plugins/all"
)

var update = flag.Bool("update", false, "rewrite docs/components/ from the components' config specs")

const (
	moduleRoot = "../.."
	pagesDir   = "../../docs/components"
	regenerate = "run `make docs` (go test ./internal/componentdocs -run TestComponentPages -update) and commit docs/components/"
)

// The committed pages are what the components' config specs render to: a field added, renamed or
// re-described in the code without `make docs` fails here, as does a page left
// behind by a component that is gone.
func TestComponentPages(t *testing.T) {
	comps, err := Registered(moduleRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) == 0 {
		t.Fatal("found no component registrations under the module root")
	}
	want, err := Pages(service.GlobalEnvironment(), comps)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string][]byte{}
	err = filepath.WalkDir(pagesDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && path == pagesDir {
				return nil
			}
			return err
		}
		if d.IsDir() || filepath.Ext(path) != ".md" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(pagesDir, path)
		if err != nil {
			return err
		}
		have[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if *update {
		for rel := range have {
			if _, ok := want[rel]; !ok {
				if err := os.Remove(filepath.Join(pagesDir, filepath.FromSlash(rel))); err != nil {
					t.Fatal(err)
				}
			}
		}
		for rel, b := range want {
			p := filepath.Join(pagesDir, filepath.FromSlash(rel))
			if bytes.Equal(have[rel], b) {
				continue
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		removeEmptyDirs(t, pagesDir)
		return
	}

	var stale, missing, differ []string
	for rel, b := range have {
		w, ok := want[rel]
		switch {
		case !ok:
			stale = append(stale, rel)
		case !bytes.Equal(w, b):
			differ = append(differ, rel)
		}
	}
	for rel := range want {
		if _, ok := have[rel]; !ok {
			missing = append(missing, rel)
		}
	}
	report := func(what string, rels []string) {
		if len(rels) == 0 {
			return
		}
		sort.Strings(rels)
		t.Errorf("docs/components: %s: %s", what, strings.Join(rels, ", "))
	}
	report("pages that differ from their component's spec", differ)
	report("pages missing", missing)
	report("pages of components that no longer exist", stale)
	if t.Failed() {
		t.Errorf("to bring docs/components/ in line with the code, %s", regenerate)
	}
}

// removeEmptyDirs drops the kind directories whose last page went away.
func removeEmptyDirs(t *testing.T, root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(root, e.Name())
		if sub, err := os.ReadDir(p); err == nil && len(sub) == 0 {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// The registrations found in the source are exactly the binary's own
// components: every one is in the environment plugins/all builds, and the
// list holds the components the product is known to ship.
func TestRegisteredFindsOurComponents(t *testing.T) {
	comps, err := Registered(moduleRoot)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range comps {
		got[string(c.Kind)+" "+c.Name] = c.Source
	}
	for _, want := range []string{
		"input kafka_franz", "input ingest_api", "input decision_api", "input outbox_claim",
		"output kafka_franz", "output pg_copy_upsert", "output redis_spool", "output outbox_send",
		"processor rule_eval", "processor event_decode", "metrics prometheus", "tracer open_telemetry_collector",
	} {
		if _, ok := got[want]; !ok {
			t.Errorf("Registered misses the %s", want)
		}
	}
	for k, src := range got {
		if !strings.HasPrefix(src, "plugins/") {
			t.Errorf("%s is registered in %s, outside plugins/", k, src)
		}
	}
	// The engine's own components are not ours: none of them may get a page.
	for _, engine := range []string{"input generate", "output drop", "processor bloblang", "metrics none"} {
		if _, ok := got[engine]; ok {
			t.Errorf("Registered lists the engine's %s as ours", engine)
		}
	}
}

func TestRegisteredReadsRegistrations(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []Component
		wantErr   string
	}{
		{
			name: "literal names of each kind",
			src: `package p
import "github.com/redpanda-data/benthos/v4/public/service"
func init() {
	service.MustRegisterBatchInput("in_b", nil, nil)
	_ = service.RegisterOutput("out", nil, nil)
	service.MustRegisterProcessor("proc", nil, nil)
	service.MustRegisterMetricsExporter("met", nil, nil)
	service.MustRegisterOtelTracerProvider("tr", nil, nil)
}`,
			want: []Component{{KindInput, "in_b", "p/p.go"}, {KindProcessor, "proc", "p/p.go"}, {KindOutput, "out", "p/p.go"}, {KindMetrics, "met", "p/p.go"}, {KindTracer, "tr", "p/p.go"}},
		},
		{
			name: "a name held in a constant, under an import alias",
			src: `package p
import svc "github.com/redpanda-data/benthos/v4/public/service"
const name = "by_const"
func init() { svc.MustRegisterBatchOutput(name, nil, nil) }`,
			want: []Component{{KindOutput, "by_const", "p/p.go"}},
		},
		{
			name: "another package's Register is not the engine's",
			src: `package p
import "github.com/prometheus/client_golang/prometheus"
func init() { prometheus.MustRegister(nil); reg.Register(nil) }`,
		},
		{
			name: "a computed name cannot be documented",
			src: `package p
import "github.com/redpanda-data/benthos/v4/public/service"
func init() { service.MustRegisterBatchInput("x"+suffix(), nil, nil) }`,
			wantErr: "string constant",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "p"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "p", "p.go"), []byte(tc.src), 0o644); err != nil {
				t.Fatal(err)
			}
			// A test file's registrations are not the product's.
			testSrc := "package p\nimport \"github.com/redpanda-data/benthos/v4/public/service\"\nfunc init() { service.MustRegisterBatchInput(\"from_test\", nil, nil) }\n"
			if err := os.WriteFile(filepath.Join(root, "p", "p_test.go"), []byte(testSrc), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Registered(root)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("[%d] = %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestMarkdownRewritesEngineCrossReferences(t *testing.T) {
	for in, want := range map[string]string{
		"A xref:guides:bloblang/about.adoc[Bloblang query] that":                 "A [Bloblang query](https://docs.redpanda.com/redpanda-connect/guides/bloblang/about/) that",
		"see xref:configuration:interpolation.adoc#bloblang-queries[functions].": "see [functions](https://docs.redpanda.com/redpanda-connect/configuration/interpolation/#bloblang-queries).",
		"\n  plain text stays  \n":                                               "plain text stays",
	} {
		if got := markdown(in); got != want {
			t.Errorf("markdown(%q) = %q, want %q", in, got, want)
		}
	}
}

// A page documents every field of its spec, with type and default, and a field
// whose spec has no default says whether it is required.
func TestPageListsEveryField(t *testing.T) {
	env := service.NewEmptyEnvironment()
	spec := service.NewConfigSpec().
		Summary("Test input.").
		Fields(
			service.NewStringField("addr").Description("Where.").Example("localhost:1"),
			service.NewIntField("size").Description("How many.").Default(3).Advanced(),
			service.NewStringField("note").Description("Optional note.").Optional(),
			service.NewObjectField("tls", service.NewBoolField("enabled").Default(false)),
			service.NewStringField("dsn").Description("Database.").Secret().Default("postgres://u:p@h/db"),
		)
	if err := env.RegisterBatchInput("probe", spec, nil); err != nil {
		t.Fatal(err)
	}
	probe := Component{Kind: KindInput, Name: "probe", Source: "plugins/x/x.go"}
	pages, err := Pages(env, []Component{probe})
	if err != nil {
		t.Fatal(err)
	}
	page := string(pages[PagePath(probe)])
	for _, want := range []string{
		"# probe input",
		"### `addr`\n\nWhere.\n\n**Type:** `string` · **Default:** none (required)",
		"addr: localhost:1",
		"### `size`\n\nHow many.\n\n**Type:** `int` · **Default:** `3` · advanced",
		"### `note`\n\nOptional note.\n\n**Type:** `string` · **Default:** none (optional)",
		"### `tls.enabled`",
		"\n    dsn: postgres://u:p@h/db\n", // the example config shows a secret's default, not the engine's scrubbed mark
		"This field is a secret",
		"[plugins/x/x.go](../../../plugins/x/x.go)",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	if row := "| [probe](" + PagePath(probe) + ") | input | Test input. |"; !strings.Contains(string(pages[IndexPath]), row) {
		t.Errorf("the index lacks probe's row:\n%s", pages[IndexPath])
	}
}
