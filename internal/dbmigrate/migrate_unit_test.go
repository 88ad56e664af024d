package dbmigrate

import (
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

func TestMigrateLoadOrdersAndValidatesFileNames(t *testing.T) {
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []string
		wantErr string
	}{
		{
			name: "ordered by number, not by listing",
			files: fstest.MapFS{
				"00010_later.sql": {Data: []byte("SELECT 10")},
				"00002_two.sql":   {Data: []byte("SELECT 2")},
				"00001_roles.sql": {Data: []byte("SELECT 1")},
			},
			want: []string{"00001_roles.sql", "00002_two.sql", "00010_later.sql"},
		},
		{
			name:    "badly named file",
			files:   fstest.MapFS{"1_roles.sql": {Data: []byte("SELECT 1")}},
			wantErr: `"1_roles.sql" is not named NNNNN_name.sql`,
		},
		{
			name: "two files, one number",
			files: fstest.MapFS{
				"00001_a.sql": {Data: []byte("SELECT 1")},
				"00001_b.sql": {Data: []byte("SELECT 1")},
			},
			wantErr: "share version 1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := load(tt.files)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("load() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("load(): %v", err)
			}
			var names []string
			for _, m := range got {
				names = append(names, m.Name)
				if len(m.Checksum) != 32 {
					t.Errorf("%s: checksum of %d bytes, want SHA-256", m.Name, len(m.Checksum))
				}
			}
			if strings.Join(names, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("load() order = %v, want %v", names, tt.want)
			}
		})
	}
}

func TestMigrateEmbeddedFilesLoad(t *testing.T) {
	all, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 || all[0].Name != "00001_roles.sql" {
		t.Fatalf("embedded migrations start with %v, want 00001_roles.sql first", all)
	}
	for i, m := range all {
		if m.Version != i+1 {
			t.Errorf("migration %s has version %d, want %d (no gaps)", m.Name, m.Version, i+1)
		}
		if strings.Contains(strings.ToUpper(m.SQL), "\nCOMMIT") || strings.Contains(strings.ToUpper(m.SQL), "\nBEGIN;") {
			t.Errorf("migration %s manages its own transaction; the runner wraps each file", m.Name)
		}
	}
}

func TestMigratePartitionWindow(t *testing.T) {
	tests := []struct {
		now       time.Time
		wantFirst string
	}{
		{time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC), "2026-10-01"},
		{time.Date(2026, 1, 15, 0, 0, 0, 0, time.UTC), "2025-12-01"},
		// 23:30 on 31 Jan in New York is already February in UTC: partitions are UTC months.
		{time.Date(2027, 1, 31, 23, 30, 0, 0, time.FixedZone("EST", -5*3600)), "2027-01-01"},
	}
	for _, tt := range tests {
		first, months := PartitionWindow(tt.now)
		if got := first.Format(time.DateOnly); got != tt.wantFirst || months != 5 {
			t.Errorf("PartitionWindow(%v) = %s, %d months; want %s, 5 months", tt.now, got, months, tt.wantFirst)
		}
	}
}

func TestMigrateBootstrapScramVerifierFormat(t *testing.T) {
	v, err := scramVerifier("it's secret")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, "SCRAM-SHA-256$4096:") || strings.Contains(v, "secret") || strings.Count(v, "$") != 2 {
		t.Fatalf("scramVerifier() = %q, not a PostgreSQL SCRAM verifier", v)
	}
	if got := quoteLiteral("a'b"); got != "'a''b'" {
		t.Fatalf("quoteLiteral = %s", got)
	}
}
