package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/speculapro/speculapro/devtools/pgwritetest"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
)

// workspace set changes the case grouping of its workspace only, refuses a
// value the stream does not know, and a workspace the key's row-level
// security hides looks like none.
func TestWorkspaceSetCaseGrouping(t *testing.T) {
	db := dbtest.New(t)
	conn := db.Connect(t, db.SuperuserURL)
	created := map[string]event.UUID{"a": pgwritetest.Workspace(t, conn, "a"), "b": pgwritetest.Workspace(t, conn, "b")}
	ctx := context.Background()
	var out bytes.Buffer
	out.Reset()
	if err := runWorkspaceSet(ctx, &out, db.AppURL, created["a"], "account"); err != nil {
		t.Fatal(err)
	}
	if out.String() != "case_grouping=account\n" {
		t.Errorf("workspace set printed %q", out.String())
	}
	if err := runWorkspaceSet(ctx, &out, db.AppURL, created["a"], "branch"); err == nil || !strings.Contains(err.Error(), "customer, account, alert") {
		t.Errorf("an unknown grouping: err %v, want the choices named", err)
	}
	var unknown event.UUID
	unknown[0] = 1
	if err := runWorkspaceSet(ctx, &out, db.AppURL, unknown, "alert"); !errors.Is(err, errNoWorkspace) {
		t.Errorf("an unknown workspace: err %v, want %v", err, errNoWorkspace)
	}
	for name, want := range map[string]string{"a": "account", "b": "customer"} {
		var got string
		if err := conn.QueryRow(ctx, "SELECT case_grouping FROM speculapro.workspaces WHERE id = $1", created[name]).Scan(&got); err != nil || got != want {
			t.Errorf("workspace %s: case_grouping %q (err %v), want %q", name, got, err, want)
		}
	}
}
