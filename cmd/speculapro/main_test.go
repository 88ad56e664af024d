package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// Without -ldflags the version names the commit Go embedded (vcs.revision,
// -dirty for uncommitted changes) and its time; -ldflags values win.
func TestVersionFallsBackToBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-01T11:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	v, c, b := fromBuildInfo(bi, "dev", "unknown", "unknown")
	if v != "dev" || c != "0123456789ab-dirty" || b != "2026-12-01T11:00:00Z" {
		t.Errorf("fallback = %q %q %q", v, c, b)
	}
	v, c, b = fromBuildInfo(bi, "v1.2.3", "abc", "2026-01-01")
	if v != "v1.2.3" || c != "abc" || b != "2026-01-01" {
		t.Errorf("ldflags values were replaced: %q %q %q", v, c, b)
	}
	bi.Main.Version = "v0.4.0"
	if v, _, _ := fromBuildInfo(bi, "dev", "unknown", "unknown"); v != "v0.4.0" {
		t.Errorf("go install …@v0.4.0 version = %q", v)
	}
}

func TestHelpDescribesSpeculaPro(t *testing.T) {
	engine := "NAME:\n   speculapro - A stream processor for mundane tasks - https://x\n\nUSAGE:\n   speculapro [global options]\n\nDESCRIPTION:\n   Either run SpeculaPro as a stream processor or choose a command:\n\n     speculapro list inputs\n\nCOMMANDS:\n   migrate  Apply\n"
	got := rewriteHelp(engine)
	if strings.Contains(got, "mundane") || strings.Contains(got, "Either run") || !strings.Contains(got, about) || !strings.Contains(got, "   migrate  Apply") || !strings.Contains(got, "USAGE:") {
		t.Errorf("rewritten help:\n%s", got)
	}
}
