package apikey

import (
	"slices"
	"testing"
)

func TestParseScopes(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: DefaultScopes, want: []string{"ingest", "decide"}},
		{in: "cases", want: []string{"cases"}},
		{in: " cases , ingest ", want: []string{"ingest", "cases"}},
		{in: "ingest,decide,cases,cases", want: []string{"ingest", "decide", "cases"}},
		{in: "", wantErr: true},
		{in: " , ", wantErr: true},
		{in: "admin", wantErr: true},
		{in: "ingest,Cases", wantErr: true},
	} {
		got, err := ParseScopes(c.in)
		if (err != nil) != c.wantErr {
			t.Errorf("ParseScopes(%q) error %v, want error %v", c.in, err, c.wantErr)
			continue
		}
		if !c.wantErr && !slices.Equal(got.Names(), c.want) {
			t.Errorf("ParseScopes(%q) = %v, want %v", c.in, got.Names(), c.want)
		}
	}
}

func TestScopesHas(t *testing.T) {
	ss, err := ScopesOf([]string{"cases"})
	if err != nil {
		t.Fatal(err)
	}
	if !ss.Has(ScopeCases) || ss.Has(ScopeIngest) || ss.Has(ScopeDecide) {
		t.Errorf("a cases key: Has(cases)=%v Has(ingest)=%v Has(decide)=%v", ss.Has(ScopeCases), ss.Has(ScopeIngest), ss.Has(ScopeDecide))
	}
}
