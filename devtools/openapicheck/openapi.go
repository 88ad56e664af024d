package openapicheck

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/speculapro/speculapro/internal/apirequest"
)

// Document is the part of the document the tests read.
type Document struct {
	Paths      map[string]map[string]openAPIOperation `json:"paths"`
	Components struct {
		Schemas map[string]*Schema `json:"schemas"`
	} `json:"components"`
}

type openAPIOperation struct {
	RequestBody *struct {
		Content map[string]struct {
			Schema *Schema `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Content map[string]struct {
			Schema *Schema `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
	Security []map[string][]string `json:"security"`
}

// Schema is the subset of JSON Schema openapi.json uses.
type Schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Required             []string           `json:"required"`
	Properties           map[string]*Schema `json:"properties"`
	AdditionalProperties *bool              `json:"additionalProperties"`
	Items                *Schema            `json:"items"`
	Enum                 []string           `json:"enum"`
	MinLength            *int               `json:"minLength"`
	MaxLength            *int               `json:"maxLength"`
	MinItems             *int               `json:"minItems"`
	MaxItems             *int               `json:"maxItems"`
	Pattern              string             `json:"pattern"`
}

// LoadDocument parses an embedded OpenAPI document (name: its file).
func LoadDocument(t *testing.T, name string, raw []byte) *Document {
	t.Helper()
	var doc Document
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &doc
}

// CheckRoutesDocumented fails t unless the document names exactly the
// served routes, each with security exactly where it is authenticated.
func CheckRoutesDocumented(t *testing.T, doc *Document, routes []apirequest.Route) {
	t.Helper()
	var documented, served []string
	for p, ops := range doc.Paths {
		for m := range ops {
			documented = append(documented, strings.ToUpper(m)+" "+p)
		}
	}
	for _, rt := range routes {
		served = append(served, rt.Method+" "+rt.Pattern)
		op := doc.Paths[rt.Pattern][strings.ToLower(rt.Method)]
		if rt.Authed != (len(op.Security) > 0) {
			t.Errorf("%s %s: authenticated=%v but the document's security says %v", rt.Method, rt.Pattern, rt.Authed, op.Security)
		}
	}
	sort.Strings(documented)
	sort.Strings(served)
	if strings.Join(documented, "\n") != strings.Join(served, "\n") {
		t.Errorf("documented routes:\n%s\nserved routes:\n%s", strings.Join(documented, "\n"), strings.Join(served, "\n"))
	}
}

func (d *Document) resolve(s *Schema) *Schema {
	for s != nil && s.Ref != "" {
		s = d.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
	}
	return s
}

// Validate lists every way v (decoded JSON) breaks s.
func (d *Document) Validate(s *Schema, v any, path string) []string {
	s = d.resolve(s)
	if s == nil {
		return []string{path + ": unresolvable schema"}
	}
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, args...)) }
	switch s.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			bad("want an object")
			break
		}
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				bad("required %q missing", r)
			}
		}
		for k, fv := range m {
			ps, ok := s.Properties[k]
			if !ok {
				if s.AdditionalProperties != nil && !*s.AdditionalProperties {
					bad("property %q not in the schema", k)
				}
				continue
			}
			errs = append(errs, d.Validate(ps, fv, path+"."+k)...)
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			bad("want an array")
			break
		}
		if s.MinItems != nil && len(a) < *s.MinItems || s.MaxItems != nil && len(a) > *s.MaxItems {
			bad("%d items outside the limits", len(a))
		}
		for i, e := range a {
			errs = append(errs, d.Validate(s.Items, e, fmt.Sprintf("%s[%d]", path, i))...)
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			bad("want a string")
			break
		}
		if len(s.Enum) > 0 && !contains(s.Enum, str) {
			bad("%q not in %v", str, s.Enum)
		}
		if s.MinLength != nil && len(str) < *s.MinLength || s.MaxLength != nil && len(str) > *s.MaxLength {
			bad("length %d outside the limits", len(str))
		}
		if s.Pattern != "" && !regexp.MustCompile(s.Pattern).MatchString(str) {
			bad("%q does not match %s", str, s.Pattern)
		}
	case "integer":
		if f, ok := v.(float64); !ok || f != float64(int64(f)) {
			bad("want an integer")
		}
	}
	return errs
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// MustJSON is v as the JSON decoder gives it back, for Validate.
func MustJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
