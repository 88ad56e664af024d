package pgrole_test

import (
	"context"
	"errors"
	"testing"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/pgrole"
)

// The documented line, printed by persist, stream and worker.
const specLine = "error: persist/stream/worker roles: database role cannot bypass row-level security (set SP_DB_SYSTEM_URL to the speculapro_system role)"

func TestRequireBypassRLSOnMigratedRoles(t *testing.T) {
	d := dbtest.NewBootstrapped(t)
	tests := []struct {
		role   string
		url    string
		refuse bool
	}{
		{"speculapro_system", d.SystemURL, false},
		{"superuser", d.SuperuserURL, false},
		{"speculapro_app", d.AppURL, true},
		{"speculapro_owner", d.OwnerURL, true},
	}
	for _, tt := range tests {
		t.Run(tt.role, func(t *testing.T) {
			err := pgrole.RequireBypassRLS(context.Background(), d.Connect(t, tt.url))
			if !tt.refuse {
				if err != nil {
					t.Fatalf("RequireBypassRLS as %s: %v", tt.role, err)
				}
				return
			}
			if !errors.Is(err, pgrole.ErrCannotBypassRLS) {
				t.Fatalf("RequireBypassRLS as %s = %v, want ErrCannotBypassRLS", tt.role, err)
			}
			if got := "error: " + err.Error(); got != specLine {
				t.Fatalf("printed line\n%s\nwant exactly\n%s", got, specLine)
			}
		})
	}
}

func TestRequireBypassRLSOnMigratedRolesReportsAClosedConnection(t *testing.T) {
	d := dbtest.NewBootstrapped(t)
	conn := d.Connect(t, d.SystemURL)
	_ = conn.Close(context.Background())
	err := pgrole.RequireBypassRLS(context.Background(), conn)
	if err == nil || errors.Is(err, pgrole.ErrCannotBypassRLS) {
		t.Fatalf("RequireBypassRLS on a closed connection = %v, want a connection error, not the role refusal", err)
	}
}
