package componentdocs

import (
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// A page shows each example of a spec as a config to copy, so every example
// must pass the engine's linter, as `speculapro lint` would run it (unset
// environment variables read as empty).
func TestComponentExamplesLint(t *testing.T) {
	comps, err := Registered(moduleRoot)
	if err != nil {
		t.Fatal(err)
	}
	env := service.GlobalEnvironment()
	linter := env.FullConfigSchema("", "").NewStreamConfigLinter().SetSkipEnvVarCheck(true)
	examples := map[string][]service.TemplatDataPluginExample{}
	keep := func(k Kind) func(string, *service.ConfigView) {
		return func(name string, v *service.ConfigView) {
			td, err := v.TemplateData()
			if err != nil {
				t.Errorf("%s %s: %v", k, name, err)
				return
			}
			examples[string(k)+" "+name] = td.Examples
		}
	}
	env.WalkInputs(keep(KindInput))
	env.WalkProcessors(keep(KindProcessor))
	env.WalkOutputs(keep(KindOutput))
	env.WalkMetrics(keep(KindMetrics))
	env.WalkTracers(keep(KindTracer))
	for _, c := range comps {
		for _, e := range examples[string(c.Kind)+" "+c.Name] {
			lints, err := linter.LintYAML([]byte(e.Config))
			if err != nil {
				t.Errorf("%s %s, example %q (%s): %v", c.Kind, c.Name, e.Title, c.Source, err)
			}
			for _, l := range lints {
				t.Errorf("%s %s, example %q (%s): line %d: %s", c.Kind, c.Name, e.Title, c.Source, l.Line, l.What)
			}
		}
	}
}
