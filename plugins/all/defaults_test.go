package all

import (
	"encoding/json"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// TestFieldDefaultsHaveTheirFieldsType: a component field's default must be
// a value of the field's type. The engine accepts any default when the
// component is declared and only refuses it when a pipeline leaves the
// field out ("expected field … to be an int, got string"), so a default
// given as text to a number field breaks every YAML that relies on it.
func TestFieldDefaultsHaveTheirFieldsType(t *testing.T) {
	env := service.GlobalEnvironment()
	check := func(kind, name string, view *service.ConfigView) {
		data, err := view.TemplateData()
		if err != nil {
			t.Errorf("%s %s: %v", kind, name, err)
			return
		}
		for _, f := range data.Fields {
			if f.DefaultMarshalled == "" {
				continue
			}
			var v any
			if err := json.Unmarshal([]byte(f.DefaultMarshalled), &v); err != nil {
				t.Errorf("%s %s field %s: default %s is not JSON: %v", kind, name, f.FullName, f.DefaultMarshalled, err)
				continue
			}
			ok := true
			switch f.Type {
			case "int", "float":
				_, ok = v.(float64)
			case "bool":
				_, ok = v.(bool)
			case "string":
				_, ok = v.(string)
			}
			if !ok {
				t.Errorf("%s %s field %s of type %s has the default %s", kind, name, f.FullName, f.Type, f.DefaultMarshalled)
			}
		}
	}
	env.WalkInputs(func(name string, v *service.ConfigView) { check("input", name, v) })
	env.WalkOutputs(func(name string, v *service.ConfigView) { check("output", name, v) })
	env.WalkProcessors(func(name string, v *service.ConfigView) { check("processor", name, v) })
}
