// Package redis holds the SpeculaPro components that talk to Redis: the
// feature_update processor, which applies each event to the running totals
// of internal/features and attaches the event's features to the message for
// rule_eval.
package redis
