package pgclass

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestClassify(t *testing.T) {
	pg := func(code, msg string) error {
		return fmt.Errorf("inserting 5000 rows: %w", &pgconn.PgError{Code: code, Message: msg})
	}
	// As PostgreSQL raises them: a check violation names its table and
	// constraint, routing a row to a missing partition only the table.
	check := func(msg string) error {
		return &pgconn.PgError{Code: "23514", Message: msg, TableName: "transactions_p2026_11", ConstraintName: "transactions_amount_check"}
	}
	noPartition := func(msg string) error {
		return fmt.Errorf("copying: %w", &pgconn.PgError{Code: "23514", Message: msg, TableName: "transactions"})
	}
	tests := []struct {
		name   string
		err    error
		want   Class
		reason string
	}{
		{"connection failure", pg("08006", "connection failure"), Retryable, "connection"},
		{"disk full", pg("53100", "could not extend file: No space left on device"), Retryable, "resources"},
		{"too many connections", pg("53300", "sorry, too many clients already"), Retryable, "resources"},
		{"admin shutdown", pg("57P01", "terminating connection due to administrator command"), Retryable, "operator intervention"},
		{"permission denied", pg("42501", "permission denied for table transactions"), Retryable, "permission"},
		{"deadlock", pg("40P01", "deadlock detected"), Retryable, "transaction conflict"},
		{"missing partition", noPartition(`no partition of relation "transactions" found for row`), Retryable, "missing partition"},
		{"missing partition in German", noPartition(`keine Partition von Relation »transactions« für Zeile gefunden`), Retryable, "missing partition"},
		{"check violation in German", check(`neue Zeile für Relation »transactions_p2026_11« verletzt Check-Constraint »transactions_amount_check«`), RowFault, "integrity"},
		{"English text without the fields is no missing partition", pg("23514", `no partition of relation "transactions" found for row`), RowFault, "integrity"},
		{"index row too large", pg("54000", "index row size 3232 exceeds btree version 4 maximum 2704 for index \"transactions_external_idx\""), RowFault, "limit"},
		{"nested too deep", pg("54001", "stack depth limit exceeded"), RowFault, "limit"},
		{"trigger refused the row", pg("P0001", "refused"), RowFault, "trigger"},
		{"query cancelled", pg("57014", "canceling statement due to statement timeout"), Retryable, "operator intervention"},
		{"out of memory", pg("53200", "out of memory"), Retryable, "resources"},
		{"undefined table", pg("42P01", `relation "transactions" does not exist`), Retryable, "other"},
		{"not from the server", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, Retryable, "other"},
		{"numeric overflow", pg("22003", "numeric field overflow"), RowFault, "data"},
		{"string too long", pg("22001", "value too long for type character(3)"), RowFault, "data"},
		{"check violation", check(`new row for relation "transactions_p2026_11" violates check constraint "transactions_amount_check"`), RowFault, "integrity"},
		{"foreign key", pg("23503", "insert or update on table violates foreign key constraint"), RowFault, "integrity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify = %s, want %s", got, tt.want)
			}
			if got := IsRowFault(tt.err); got != (tt.want == RowFault) {
				t.Errorf("IsRowFault = %v", got)
			}
			if got := Reason(tt.err); got != tt.reason {
				t.Errorf("Reason = %q, want %q", got, tt.reason)
			}
		})
	}
}

func TestCode(t *testing.T) {
	code, msg := Code(fmt.Errorf("x: %w", &pgconn.PgError{Code: "22003", Message: "numeric field overflow", Detail: "secret row value"}))
	if code != "22003" || msg != "numeric field overflow" {
		t.Errorf("Code = %q, %q", code, msg)
	}
	if code, msg := Code(errors.New("plain")); code != "" || msg != "" {
		t.Errorf("Code(plain) = %q, %q, want empty", code, msg)
	}
}
