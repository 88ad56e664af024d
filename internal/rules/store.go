package rules

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
)

// ErrNoWorkspace: Apply named a workspace that does not exist or is not
// active; row-level security makes both look the same.
var ErrNoWorkspace = errors.New("no such active workspace")

// Querier is what LoadEnabled and Fingerprint read through: a *pgx.Conn, a
// *pgxpool.Pool or a pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// What Apply did to one rule.
const (
	OpCreated   = "created"
	OpUpdated   = "updated"
	OpUnchanged = "unchanged"
	OpDisabled  = "disabled" // pruned, but it has hits or alerts that refer to it
	OpDeleted   = "deleted"  // pruned, nothing referred to it
)

// Change is what Apply did to one rule; Version is the rule's version after
// it (0 once deleted).
type Change struct {
	Name    string
	Op      string
	Version int
}

func (c Change) String() string {
	switch c.Op {
	case OpDeleted, OpDisabled:
		return c.Op + " " + c.Name
	}
	return fmt.Sprintf("%s %s v%d", c.Op, c.Name, c.Version)
}

const ruleColumns = `id::text, workspace_id::text, name, coalesce(description, ''), applies_to, expression,
       severity, action, alert, mode, score::text, enabled, version`

// Apply makes workspace's rules in the database match rules, by name, inside
// tx (which it binds to workspace for row-level security, so it runs as the
// app role): a new name is created at version 1; an existing one is updated,
// and its version bumped, only if something a hit depends on changed
// (expression, description, severity, action, alert, mode, score, enabled,
// applies_to): switching a rule between shadow and live is a new version, so
// each hit says which mode fired it. With prune, the workspace's rules not in rules are deleted —
// or, when a hit or an alert refers to them and so they cannot be, disabled.
// Rules are expected valid (ParseFiles has checked them).
func Apply(ctx context.Context, tx pgx.Tx, workspace event.UUID, rules []Rule, prune bool) ([]Change, error) {
	if _, err := tx.Exec(ctx, `SELECT set_config('speculapro.workspace_id', $1, true)`, workspace.String()); err != nil {
		return nil, fmt.Errorf("binding the session to workspace %s: %w", workspace, err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM speculapro.workspaces WHERE id = $1 AND status = 'active'`, workspace).Scan(&n); err != nil {
		return nil, fmt.Errorf("looking up workspace %s: %w", workspace, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("workspace %s: %w", workspace, ErrNoWorkspace)
	}
	// FOR UPDATE: two applies to one workspace take turns instead of both
	// deciding from the same old rows.
	rows, err := tx.Query(ctx, `SELECT `+ruleColumns+` FROM speculapro.rules WHERE workspace_id = $1 ORDER BY name FOR UPDATE`, workspace)
	if err != nil {
		return nil, fmt.Errorf("reading the rules of workspace %s: %w", workspace, err)
	}
	existing, err := pgx.CollectRows(rows, scanRule)
	if err != nil {
		return nil, fmt.Errorf("reading the rules of workspace %s: %w", workspace, err)
	}
	byName := make(map[string]*Rule, len(existing))
	for i := range existing {
		byName[existing[i].Name] = &existing[i]
	}

	var changes []Change
	wanted := make(map[string]bool, len(rules))
	for i := range rules {
		r := &rules[i]
		wanted[r.Name] = true
		old, ok := byName[r.Name]
		if !ok {
			if _, err := tx.Exec(ctx, `INSERT INTO speculapro.rules
  (workspace_id, name, description, applies_to, expression, severity, action, alert, mode, score, enabled, version)
VALUES ($1, $2, NULLIF($3, ''), $4, $5, $6, $7, $8, $9, $10::numeric, $11, 1)`,
				workspace, r.Name, r.Description, string(r.AppliesTo), r.Expression, r.Severity, r.Action, r.Alert, r.ModeOrLive(), r.Score, r.Enabled); err != nil {
				return nil, fmt.Errorf("creating rule %q: %w", r.Name, err)
			}
			changes = append(changes, Change{Name: r.Name, Op: OpCreated, Version: 1})
			continue
		}
		if sameContent(old, r) {
			changes = append(changes, Change{Name: r.Name, Op: OpUnchanged, Version: old.Version})
			continue
		}
		var v int
		if err := tx.QueryRow(ctx, `UPDATE speculapro.rules
   SET description = NULLIF($2, ''), applies_to = $3, expression = $4, severity = $5, action = $6,
       alert = $7, mode = $8, score = $9::numeric, enabled = $10, version = version + 1, updated_at = now()
 WHERE id = $1 RETURNING version`,
			old.ID, r.Description, string(r.AppliesTo), r.Expression, r.Severity, r.Action, r.Alert, r.ModeOrLive(), r.Score, r.Enabled).Scan(&v); err != nil {
			return nil, fmt.Errorf("updating rule %q: %w", r.Name, err)
		}
		changes = append(changes, Change{Name: r.Name, Op: OpUpdated, Version: v})
	}
	if !prune {
		return changes, nil
	}
	for i := range existing {
		old := &existing[i]
		if wanted[old.Name] {
			continue
		}
		c, err := pruneRule(ctx, tx, old)
		if err != nil {
			return nil, err
		}
		changes = append(changes, c)
	}
	return changes, nil
}

// pruneRule deletes a rule no file defines any more, unless a hit or an
// alert refers to it (their foreign keys forbid the delete, and an analyst
// must still see what fired): then it is only disabled.
func pruneRule(ctx context.Context, tx pgx.Tx, old *Rule) (Change, error) {
	var referred bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM speculapro.rule_hits WHERE rule_id = $1)
    OR EXISTS (SELECT 1 FROM speculapro.alerts WHERE rule_id = $1)`, old.ID).Scan(&referred); err != nil {
		return Change{}, fmt.Errorf("looking for hits of rule %q: %w", old.Name, err)
	}
	if !referred {
		if _, err := tx.Exec(ctx, `DELETE FROM speculapro.rules WHERE id = $1`, old.ID); err != nil {
			return Change{}, fmt.Errorf("deleting rule %q: %w", old.Name, err)
		}
		return Change{Name: old.Name, Op: OpDeleted}, nil
	}
	if !old.Enabled {
		return Change{Name: old.Name, Op: OpUnchanged, Version: old.Version}, nil
	}
	var v int
	if err := tx.QueryRow(ctx, `UPDATE speculapro.rules SET enabled = false, version = version + 1, updated_at = now()
 WHERE id = $1 RETURNING version`, old.ID).Scan(&v); err != nil {
		return Change{}, fmt.Errorf("disabling rule %q: %w", old.Name, err)
	}
	return Change{Name: old.Name, Op: OpDisabled, Version: v}, nil
}

// sameContent reports whether applying r over old would change nothing a
// hit depends on.
func sameContent(old, r *Rule) bool {
	return old.Expression == r.Expression && old.Description == r.Description &&
		old.Severity == r.Severity && old.Action == r.Action && old.Alert == r.Alert && old.Mode == r.ModeOrLive() &&
		CanonicalScore(old.Score) == CanonicalScore(r.Score) && old.Enabled == r.Enabled &&
		old.AppliesTo == r.AppliesTo
}

// List returns workspace's rules, enabled or not, by name.
func List(ctx context.Context, tx pgx.Tx, workspace event.UUID) ([]Rule, error) {
	if _, err := tx.Exec(ctx, `SELECT set_config('speculapro.workspace_id', $1, true)`, workspace.String()); err != nil {
		return nil, fmt.Errorf("binding the session to workspace %s: %w", workspace, err)
	}
	rows, err := tx.Query(ctx, `SELECT `+ruleColumns+` FROM speculapro.rules WHERE workspace_id = $1 ORDER BY name`, workspace)
	if err != nil {
		return nil, fmt.Errorf("listing the rules of workspace %s: %w", workspace, err)
	}
	rs, err := pgx.CollectRows(rows, scanRule)
	if err != nil {
		return nil, fmt.Errorf("listing the rules of workspace %s: %w", workspace, err)
	}
	return rs, nil
}

// LoadEnabled returns every enabled rule the session can see, by workspace
// and name: with the system role (BYPASSRLS, the stream's) that is every
// workspace's.
func LoadEnabled(ctx context.Context, db Querier) (map[event.UUID][]Rule, error) {
	rows, err := db.Query(ctx, `SELECT `+ruleColumns+` FROM speculapro.rules WHERE enabled ORDER BY workspace_id, name`)
	if err != nil {
		return nil, fmt.Errorf("loading the enabled rules: %w", err)
	}
	rs, err := pgx.CollectRows(rows, scanRule)
	if err != nil {
		return nil, fmt.Errorf("loading the enabled rules: %w", err)
	}
	out := map[event.UUID][]Rule{}
	for _, r := range rs {
		out[r.WorkspaceID] = append(out[r.WorkspaceID], r)
	}
	return out, nil
}

// Fingerprint is a cheap probe of whether any rule changed since it was last
// taken: every Apply that changes something changes the count of rules, the
// latest updated_at or the sum of versions. Equal fingerprints: nothing to
// reload.
func Fingerprint(ctx context.Context, db Querier) (string, error) {
	var fp string
	if err := db.QueryRow(ctx, `SELECT count(*)::text || '/' || coalesce(max(updated_at)::text, '-') || '/' || coalesce(sum(version), 0)::text
  FROM speculapro.rules`).Scan(&fp); err != nil {
		return "", fmt.Errorf("probing the rules for changes: %w", err)
	}
	return fp, nil
}

func scanRule(row pgx.CollectableRow) (Rule, error) {
	var r Rule
	var id, ws, appliesTo string
	if err := row.Scan(&id, &ws, &r.Name, &r.Description, &appliesTo, &r.Expression,
		&r.Severity, &r.Action, &r.Alert, &r.Mode, &r.Score, &r.Enabled, &r.Version); err != nil {
		return r, err
	}
	var err error
	if r.ID, err = event.ParseUUID(id); err != nil {
		return r, fmt.Errorf("rule id: %w", err)
	}
	if r.WorkspaceID, err = event.ParseUUID(ws); err != nil {
		return r, fmt.Errorf("rule %s workspace_id: %w", id, err)
	}
	r.AppliesTo = event.Kind(appliesTo)
	r.Score = CanonicalScore(r.Score)
	return r, nil
}
