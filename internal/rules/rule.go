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
	Modes      = []string{ModeLive, ModeShadow}
)

// A rule's mode. A live rule acts on what it fires on (alerts, the
// decision); a shadow rule is evaluated the same way and its hits stored,
// marked shadow, but it raises no alert and changes no decision: how a new
// rule is watched on real traffic before anyone relies on it.
const (
	ModeLive   = "live"
	ModeShadow = "shadow"
)

// Validation errors, wrapped with the offending rule's name.
var (
	ErrInvalidName       = errors.New("name must match [a-z0-9_]+ (at most 100 characters)")
	ErrInvalidAppliesTo  = errors.New("applies_to must be transaction or account_event")
	ErrInvalidSeverity   = errors.New("severity must be low, medium, high or critical")
	ErrInvalidAction     = errors.New("action must be alert, review or decline")
	ErrInvalidMode       = errors.New("mode must be live or shadow")
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
	Mode            string // ModeLive or ModeShadow
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
	if !oneOf(r.Mode, Modes) {
		errs = append(errs, ErrInvalidMode)
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

// ModeOrLive is the rule's mode, live when unset (a Rule built in code
// rather than read from a file or the database).
func (r *Rule) ModeOrLive() string {
	if r.Mode == "" {
		return ModeLive
	}
	return r.Mode
}

// Shadow reports whether the rule is in shadow mode: evaluated and its hits
// stored, nothing acted on.
func (r *Rule) Shadow() bool { return r.Mode == ModeShadow }

// Acts reports whether a hit of the rule raises an alert: a live rule whose
// alert is on.
func (r *Rule) Acts() bool { return r.Alert && !r.Shadow() }

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
