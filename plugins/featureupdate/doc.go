// Package featureupdate holds the feature_update processor, which applies
// each event to the running totals of internal/features in Redis and
// attaches the event's features to the message for rule_eval.
package featureupdate
