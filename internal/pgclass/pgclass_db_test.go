package pgclass

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
)

// TestClassifyInGerman: with the system role's lc_messages in German (set for
// this test's database only), PostgreSQL's own errors are still classified
// right: a month without a partition waits, a row's fault is isolated. The
// locale comes from deploy/local/stack.sh (de_DE.UTF-8); without it setting
// lc_messages fails and so does the test: it cannot pass in English.
func TestClassifyInGerman(t *testing.T) {
	db := dbtest.New(t)
	super := db.Connect(t, db.SuperuserURL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := super.Exec(ctx, `ALTER ROLE speculapro_system IN DATABASE "`+db.Name+`" SET lc_messages = 'de_DE.UTF-8'`); err != nil {
		t.Fatalf("setting lc_messages to de_DE.UTF-8 (run deploy/local/stack.sh up to install the locale): %v", err)
	}
	sys := db.Connect(t, db.SystemURL)
	_, err := sys.Exec(ctx, "SELECT 1/0")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Message != "Division durch Null" {
		t.Fatalf("messages are not German (the test would prove nothing): %v", err)
	}

	insert := func(occurredAt time.Time, externalID, amount string) error {
		_, err := sys.Exec(ctx, `INSERT INTO speculapro.transactions
			(id, workspace_id, external_id, account_id, customer_id, amount, currency, direction, occurred_at)
			VALUES (gen_random_uuid(), gen_random_uuid(), $1, gen_random_uuid(), gen_random_uuid(), $2::numeric, 'EUR', 'out', $3)`,
			externalID, amount, occurredAt)
		return err
	}
	// No partition for 2001: the batch waits.
	err = insert(time.Date(2001, 5, 1, 0, 0, 0, 0, time.UTC), "x", "1")
	if err == nil {
		t.Fatal("a row of 2001 was stored: there should be no partition for it")
	}
	if _, msg := Code(err); strings.HasPrefix(msg, "no partition") {
		t.Fatalf("the message is English: %s", msg)
	}
	if !IsMissingPartition(err) || Classify(err) != Retryable || Reason(err) != "missing partition" {
		t.Errorf("missing partition in German: IsMissingPartition=%v Classify=%s Reason=%s (%v)", IsMissingPartition(err), Classify(err), Reason(err), err)
	}
	// The row's own faults, in a month that has a partition.
	now := time.Now().UTC()
	for name, tt := range map[string]struct {
		ext, amount, reason string
	}{
		"negative amount":     {"y", "-1", "integrity"},
		"amount out of range": {"y", "1e20", "data"},
		"index row too large": {randomText(8000), "1", "limit"},
		"NUL in text":         {"a\x00b", "1", "data"},
	} {
		err := insert(now, tt.ext, tt.amount)
		if err == nil {
			t.Errorf("%s: stored", name)
			continue
		}
		if IsMissingPartition(err) || !IsRowFault(err) || Reason(err) != tt.reason {
			t.Errorf("%s: IsMissingPartition=%v IsRowFault=%v Reason=%s, want a row fault (%s): %v", name, IsMissingPartition(err), IsRowFault(err), Reason(err), tt.reason, err)
		}
	}
}

// randomText is n random letters and digits: incompressible enough that the
// index entry stays larger than a B-tree page allows.
func randomText(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
