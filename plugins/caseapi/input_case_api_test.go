package caseapi

import (
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// The component's defaults make a working API, and settings out of range are
// refused when the pipeline is built, naming the field.
func TestCaseAPIConfig(t *testing.T) {
	for _, c := range []struct {
		yaml, wantErr string
	}{
		{yaml: `{}`},
		{yaml: `{max_connections: 2, query_timeout: 1s, address: "127.0.0.1:0"}`},
		{yaml: `{max_connections: 0}`, wantErr: "max_connections"},
		{yaml: `{query_timeout: 0s}`, wantErr: "query_timeout"},
		{yaml: `{max_body_bytes: 10}`, wantErr: "max_body_bytes"},
		{yaml: `{db_url: "postgres://%zz"}`, wantErr: "db_url"},
	} {
		conf, err := caseAPISpec().ParseYAML(c.yaml, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.yaml, err)
		}
		a, err := newCaseAPI(conf, service.MockResources())
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.yaml, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: %v, want an error naming %s", c.yaml, err, c.wantErr)
		case err == nil && (a.Server != nil || a.Pool != nil):
			t.Errorf("%s: the constructor opened the server or the pool", c.yaml)
		}
	}
}
