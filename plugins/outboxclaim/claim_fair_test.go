package outboxclaim

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/outbox"
)

// claimFixture is a migrated database with endpoints and their queued
// deliveries, and an outbox_claim reading it.
type claimFixture struct {
	conn *pgx.Conn
	in   *outboxClaim
	db   *dbtest.DB
}

func newClaimFixture(t *testing.T, batchSize, limit, tenant int) *claimFixture {
	t.Helper()
	db := dbtest.New(t)
	f := &claimFixture{conn: db.Connect(t, db.SuperuserURL), db: db}
	conf, err := outboxClaimSpec().ParseYAML(fmt.Sprintf("url: %s\noutboxes: [webhook]\nbatch_size: %d\nendpoint_concurrency: %d\nworkspace_concurrency: %d\nlease: 1m\n",
		db.SystemURL, batchSize, limit, tenant), nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.in, err = newOutboxClaim(conf, service.MockResources()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.in.pool.Close() })
	return f
}

// endpoint adds an enabled endpoint to workspace ws (made if new) with n
// deliveries due (dbtest.SeedWebhookEndpoint).
func (f *claimFixture) endpoint(t *testing.T, ws string, n, ageSeconds int) event.UUID {
	t.Helper()
	return dbtest.SeedWebhookEndpoint(t, f.conn, ws, n, ageSeconds)
}

// claimed claims once and counts the claimed deliveries per endpoint.
func (f *claimFixture) claimed(t *testing.T) map[event.UUID]int {
	t.Helper()
	batch, _, err := f.in.claim(context.Background(), outbox.Webhook)
	if err != nil {
		t.Fatal(err)
	}
	got := map[event.UUID]int{}
	for _, m := range batch {
		v, _ := m.MetaGet(outbox.MetaEndpoint)
		id, err := event.ParseUUID(v)
		if err != nil {
			t.Fatal(err)
		}
		got[id]++
	}
	return got
}

// A claim takes each endpoint's due deliveries up to its free slots and
// fills the batch round-robin (workspaces, then endpoints), however old one
// endpoint's backlog is, each workspace up to its own slots; an endpoint whose slots are all in flight gets
// nothing until an outcome is recorded or its lease runs out.
func TestClaimIsFairAcrossEndpoints(t *testing.T) {
	tests := []struct {
		name   string
		batch  int
		limit  int
		tenant int // 0: 1000
		// endpoints: workspace, due deliveries, age of the oldest (s)
		endpoints []struct {
			ws       string
			due, age int
		}
		want [][]int // per claim in turn: deliveries per endpoint, in the endpoints' order
	}{
		{
			name: "an old backlog does not fill the batch", batch: 10, limit: 4,
			endpoints: []struct {
				ws       string
				due, age int
			}{{"hanging", 1000, 5000}, {"healthy", 3, 10}, {"failing", 1000, 4000}},
			// Second claim: only the failing endpoint's fourth slot is free.
			want: [][]int{{4, 3, 3}, {0, 0, 1}, {0, 0, 0}},
		},
		{
			name: "the batch is shared by turn, oldest first within a turn", batch: 5, limit: 4,
			endpoints: []struct {
				ws       string
				due, age int
			}{{"a", 10, 100}, {"b", 10, 50}, {"c", 10, 10}},
			// Turn 1 gives each endpoint one, turn 2 starts with the oldest.
			want: [][]int{{2, 2, 1}, {2, 2, 1}, {0, 0, 2}, {0, 0, 0}},
		},
		{
			name: "workspaces take turns before their endpoints do", batch: 4, limit: 4,
			endpoints: []struct {
				ws       string
				due, age int
			}{{"big", 10, 100}, {"big", 10, 90}, {"big", 10, 80}, {"small", 10, 10}},
			// The big workspace's three endpoints share its turns; small has one endpoint.
			want: [][]int{{1, 1, 0, 2}},
		},
		{
			name: "a workspace's endpoints share its slots", batch: 100, limit: 4, tenant: 8,
			endpoints: []struct {
				ws       string
				due, age int
			}{{"many", 10, 100}, {"many", 10, 90}, {"many", 10, 80}, {"many", 10, 70}, {"many", 10, 60}, {"many", 10, 50}, {"one", 10, 10}},
			// Six endpoints of one tenant hold its 8 slots, round-robin; the other tenant's endpoint is not crowded out.
			want: [][]int{{2, 2, 1, 1, 1, 1, 4}, {0, 0, 0, 0, 0, 0, 0}},
		},
		{
			name: "a limit of one", batch: 100, limit: 1,
			endpoints: []struct {
				ws       string
				due, age int
			}{{"a", 10, 100}, {"b", 10, 100}},
			want: [][]int{{1, 1}, {0, 0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tenant := tt.tenant
			if tenant == 0 {
				tenant = 1000
			}
			f := newClaimFixture(t, tt.batch, tt.limit, tenant)
			var ids []event.UUID
			for _, e := range tt.endpoints {
				ids = append(ids, f.endpoint(t, e.ws, e.due, e.age))
			}
			for round, want := range tt.want {
				got := f.claimed(t)
				for i, id := range ids {
					if got[id] != want[i] {
						t.Errorf("claim %d: endpoint %d (%s) got %d deliveries, want %d (all: %v)", round+1, i, tt.endpoints[i].ws, got[id], want[i], got)
					}
				}
			}
		})
	}
}

// Recording an outcome frees the endpoint's slot at once, and a lease that
// ran out (a dead worker's delivery) no longer counts as in flight.
func TestClaimFreesSlotsOnOutcomeAndLeaseExpiry(t *testing.T) {
	f := newClaimFixture(t, 100, 2, 1000)
	ep := f.endpoint(t, "ws", 10, 100)
	if got := f.claimed(t)[ep]; got != 2 {
		t.Fatalf("first claim: %d, want 2", got)
	}
	ctx := context.Background()
	// One outcome recorded (delivered): one slot free.
	if _, err := f.conn.Exec(ctx, `UPDATE speculapro.webhook_deliveries SET status = 'delivered', claimed_by = NULL
 WHERE id = (SELECT id FROM speculapro.webhook_deliveries WHERE claimed_by IS NOT NULL AND status = 'pending' LIMIT 1)`); err != nil {
		t.Fatal(err)
	}
	if got := f.claimed(t)[ep]; got != 1 {
		t.Fatalf("after one outcome: %d claimed, want 1", got)
	}
	// Both leases run out: both slots free, and those two come due again.
	if _, err := f.conn.Exec(ctx, `UPDATE speculapro.webhook_deliveries SET next_attempt_at = now() - interval '1s'
 WHERE claimed_by IS NOT NULL AND status = 'pending'`); err != nil {
		t.Fatal(err)
	}
	if got := f.claimed(t)[ep]; got != 2 {
		t.Fatalf("after the leases ran out: %d claimed, want 2", got)
	}
	// A disabled endpoint gets nothing.
	if _, err := f.conn.Exec(ctx, `UPDATE speculapro.webhook_deliveries SET claimed_by = NULL, next_attempt_at = now() - interval '1s' WHERE status = 'pending';
UPDATE speculapro.webhook_endpoints SET enabled = false`); err != nil {
		t.Fatal(err)
	}
	if got := f.claimed(t)[ep]; got != 0 {
		t.Fatalf("disabled endpoint: %d claimed, want 0", got)
	}
}

func TestSpecParsesItsDefaults(t *testing.T) {
	if _, err := outboxClaimSpec().ParseYAML("{}", nil); err != nil {
		t.Errorf("outbox_claim defaults: %v", err)
	}
}

// The constructor does no I/O, and Connect waits for PostgreSQL only as
// long as its context lasts (a SIGTERM during start-up).
func TestConstructorDoesNoIO(t *testing.T) {
	testenv.CheckNoIOUntilConnect(t, "outbox_claim", outboxClaimSpec(), "",
		func(conf *service.ParsedConfig) (*outboxClaim, error) {
			return newOutboxClaim(conf, service.MockResources())
		},
		func(ctx context.Context, in *outboxClaim) error { return in.Connect(ctx) })
}
