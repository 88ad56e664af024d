package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/speculapro/speculapro/internal/apikey"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
)

// apikey list shows a workspace's keys (never the secret) and apikey revoke
// makes a key unusable: workspace_for_api_key no longer names its workspace.
func TestAPIKeyListAndRevoke(t *testing.T) {
	db := dbtest.New(t)
	ctx := context.Background()
	var out bytes.Buffer
	if err := runWorkspaceCreate(ctx, &out, db.AppURL, "cli test"); err != nil {
		t.Fatal(err)
	}
	wsText := regexp.MustCompile(`workspace_id=(\S+)`).FindStringSubmatch(out.String())[1]
	secret := regexp.MustCompile(`api_key=(\S+)`).FindStringSubmatch(out.String())[1]
	prefix := regexp.MustCompile(`key_prefix=(\S+)`).FindStringSubmatch(out.String())[1]
	ws, err := event.ParseUUID(wsText)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := runAPIKeyCreate(ctx, &out, db.AppURL, ws, "second", apikey.Scopes(apikey.ScopeCases)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "scopes=cases\n") {
		t.Errorf("apikey create --scopes cases printed:\n%s", out.String())
	}
	out.Reset()
	if err := runAPIKeyList(ctx, &out, db.AppURL, ws); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), prefix) || !strings.Contains(out.String(), "second") || strings.Contains(out.String(), secret[len(prefix):]) {
		t.Fatalf("apikey list:\n%s", out.String())
	}
	// The workspace's first key keeps what every key could do before
	// scopes; the second holds only what it was created with.
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, prefix) && !strings.Contains(l, " ingest,decide ") ||
			strings.Contains(l, " second ") && !strings.Contains(l, " cases ") {
			t.Errorf("apikey list shows the wrong scopes: %q", l)
		}
	}
	if n := strings.Count(out.String(), "\n"); n != 3 {
		t.Errorf("apikey list printed %d lines, want a header and 2 keys:\n%s", n, out.String())
	}

	out.Reset()
	if err := runAPIKeyRevoke(ctx, &out, db.AppURL, ws, prefix, ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "revoked "+prefix) {
		t.Errorf("apikey revoke said %q", out.String())
	}
	hash, _ := apikey.Hash(secret)
	conn := db.Connect(t, db.AppURL)
	var got *event.UUID
	if err := conn.QueryRow(ctx, `SELECT speculapro.workspace_for_api_key($1)`, hash).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != nil {
		t.Error("the revoked key still names its workspace")
	}
	out.Reset()
	if err := runAPIKeyList(ctx, &out, db.AppURL, ws); err != nil {
		t.Fatal(err)
	}
	line := ""
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, prefix) {
			line = l
		}
	}
	if strings.HasSuffix(strings.TrimSpace(line), "-") {
		t.Errorf("apikey list shows the revoked key without its revocation time: %q", line)
	}

	if err := runAPIKeyRevoke(ctx, &out, db.AppURL, ws, "spk_00000000", ""); !errors.Is(err, errNoSuchKey) {
		t.Errorf("revoking an unknown prefix: %v, want errNoSuchKey", err)
	}
	if err := runAPIKeyRevoke(ctx, &out, db.AppURL, ws, "", ""); err == nil {
		t.Error("revoke without --prefix or --id succeeded")
	}
	// Another workspace's key cannot be revoked through this workspace.
	other := event.UUID{1, 2, 3}
	if err := runAPIKeyRevoke(ctx, &out, db.AppURL, other, prefix, ""); !errors.Is(err, errNoSuchKey) {
		t.Errorf("revoking through another workspace: %v, want errNoSuchKey", err)
	}
}
