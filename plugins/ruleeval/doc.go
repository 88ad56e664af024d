// Package ruleeval owns the stream's rule step: the `rule_eval` processor, which
// keeps every workspace's enabled rules compiled (one program per workspace,
// reloaded within seconds of a change, without a restart), evaluates them on
// each event with the running totals `feature_update` attached, and leaves
// what fired, and the feature values each rule read, on the message for
// `pg_rule_hits` to store. A rule that fails on an event is counted and
// logged for that rule alone and never fails the message.
package ruleeval
