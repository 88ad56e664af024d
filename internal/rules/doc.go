// Package rules owns detection rules: the Rule model and its validation, the
// YAML rule files (with their test cases) authors write, the compilation of
// all of a workspace's rules into ONE Bloblang program run once per event,
// the evaluation of that program against an event and its running totals
// (features), and the rules' storage in PostgreSQL (speculapro.rules). A rule
// is live or shadow (its Mode): a shadow rule is evaluated the same way, and
// its hits stored, but it never acts (no alert, no decision). A rule
// whose expression fails on one event is reported for that rule alone; it
// never stops the others.
package rules
