package rules

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/speculapro/speculapro/internal/event"
)

// The values a rule's enumerated fields take; the same CHECK constraints
// guard speculapro.rules.
var (
	Severities = []string{"low", "medium", "high", "critical"}
	Actions    = []string{"alert", "review", "decline"}
)

// Validation errors, wrapped with the offending rule's name.
var (
	ErrInvalidName       = errors.New("name must match [a-z0-9_]+ (at most 100 characters)")
	ErrInvalidAppliesTo  = errors.New("applies_to must be transaction or account_event")
	ErrInvalidSeverity   = errors.New("severity must be low, medium, high or critical")
	ErrInvalidAction     = errors.New("action must be alert, review or decline")
	ErrInvalidScore      = errors.New("score must be a decimal with at most 5 digits before the point and 4 after")
	ErrEmptyExpression   = errors.New("expression is empty")
	ErrDuplicateRuleName = errors.New("rule name used twice")
)

// Rule is one detection rule of one workspace. Expression is a Bloblang query
// over {"event": …, "features": …} that yields a bool; Version increases on
// every change, so a hit records exactly what fired.
type Rule struct {
	ID, WorkspaceID event.UUID
	Name            string
	Description     string
	AppliesTo       event.Kind
	Expression      string
	Severity        string
	Action          string
	Alert           bool   // whether a hit raises an alert (hits are recorded either way)
	Score           string // decimal, numeric(9,4)
	Enabled         bool
	Version         int
}

var (
	namePattern  = regexp.MustCompile(`^[a-z0-9_]{1,100}$`)
	scorePattern = regexp.MustCompile(`^-?[0-9]{1,5}(\.[0-9]{1,4})?$`)
)

// Validate checks every field a rule file or the database can get wrong,
// before anything is compiled or written.
func (r *Rule) Validate() error {
	var errs []error
	if !namePattern.MatchString(r.Name) {
		errs = append(errs, ErrInvalidName)
	}
	if r.AppliesTo != event.KindTransaction && r.AppliesTo != event.KindAccountEvent {
		errs = append(errs, ErrInvalidAppliesTo)
	}
	if !oneOf(r.Severity, Severities) {
		errs = append(errs, ErrInvalidSeverity)
	}
	if !oneOf(r.Action, Actions) {
		errs = append(errs, ErrInvalidAction)
	}
	if !scorePattern.MatchString(r.Score) {
		errs = append(errs, ErrInvalidScore)
	}
	if strings.TrimSpace(r.Expression) == "" {
		errs = append(errs, ErrEmptyExpression)
	}
	if len(errs) > 0 {
		return fmt.Errorf("rule %q: %w", r.Name, errors.Join(errs...))
	}
	return nil
}

// CanonicalScore writes a valid score the way PostgreSQL's numeric would
// compare it: no trailing fractional zeros, no leading zeros, no "-0". Two
// scores are the same exactly when their canonical forms are equal.
func CanonicalScore(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	whole = strings.TrimLeft(whole, "0")
	frac = strings.TrimRight(frac, "0")
	if whole == "" {
		whole = "0"
	}
	out := whole
	if frac != "" {
		out += "." + frac
	}
	if neg && out != "0" {
		out = "-" + out
	}
	return out
}

func oneOf(s string, set []string) bool {
	for _, v := range set {
		if s == v {
			return true
		}
	}
	return false
}
