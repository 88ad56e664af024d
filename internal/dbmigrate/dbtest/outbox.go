package dbtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
)

// SeedWebhookEndpoint adds an enabled endpoint to workspace ws (made if new) with n
// deliveries due, the oldest first by a second each, starting ageSeconds
// ago.
func SeedWebhookEndpoint(t testing.TB, conn *pgx.Conn, ws string, n, ageSeconds int) event.UUID {
	t.Helper()
	ctx := context.Background()
	var wsID, id event.UUID
	if err := conn.QueryRow(ctx, `WITH found AS (SELECT id FROM speculapro.workspaces WHERE name = $1),
made AS (INSERT INTO speculapro.workspaces (name) SELECT $1 WHERE NOT EXISTS (SELECT 1 FROM found) RETURNING id)
SELECT id FROM found UNION ALL SELECT id FROM made`, ws).Scan(&wsID); err != nil {
		t.Fatalf("workspace %s: %v", ws, err)
	}
	if err := conn.QueryRow(ctx, `INSERT INTO speculapro.webhook_endpoints (workspace_id, url, secret_encrypted)
VALUES ($1, 'https://hooks.example.com/x', '\x00') RETURNING id`, wsID).Scan(&id); err != nil {
		t.Fatalf("endpoint: %v", err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO speculapro.webhook_deliveries (workspace_id, endpoint_id, event_type, event_id, payload, next_attempt_at)
SELECT $1, $2, 'alert.created', gen_random_uuid(), '{}', now() - make_interval(secs => $3 - g)
  FROM generate_series(1, $4) g`, wsID, id, ageSeconds, n); err != nil {
		t.Fatalf("deliveries: %v", err)
	}
	return id
}
