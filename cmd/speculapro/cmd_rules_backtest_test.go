package main

import (
	"strings"
	"testing"
	"time"
)

// The backtest's arguments: required flags, times as RFC 3339 or dates,
// formats, counts and memory sizes, each refusal naming the flag.
func TestBacktestArgs(t *testing.T) {
	ok := map[string]string{"workspace": "0a1b2c3d-4e5f-4071-8293-a4b5c6d7e8f9", "from": "2026-11-01",
		"to": "2026-12-01T00:00:00Z", "format": "table", "max-memory": "1GiB", "explain": "3"}
	a, err := parseBacktestArgs([]string{"r.yaml"}, ok)
	if err != nil {
		t.Fatal(err)
	}
	if !a.opts.From.Equal(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) || a.opts.Explain != 3 || a.opts.MaxMemory != 1<<30 {
		t.Fatalf("parsed %+v", a.opts)
	}
	for _, c := range []struct{ key, value, want string }{
		{"workspace", "", "--workspace is required"},
		{"workspace", "nope", "--workspace"},
		{"from", "yesterday", "--from"},
		{"to", "2026-10-01", "--from must be before --to"},
		{"format", "xml", "--format"},
		{"explain", "-1", "--explain"},
		{"max-memory", "lots", "--max-memory"},
	} {
		vals := map[string]string{}
		for k, v := range ok {
			vals[k] = v
		}
		vals[c.key] = c.value
		if _, err := parseBacktestArgs([]string{"r.yaml"}, vals); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--%s %q: %v, want %q", c.key, c.value, err, c.want)
		}
	}
	if _, err := parseBacktestArgs(nil, ok); err == nil || !strings.Contains(err.Error(), "no rule files") {
		t.Errorf("no files: %v", err)
	}
}
