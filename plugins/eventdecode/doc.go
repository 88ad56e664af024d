// Package eventdecode holds the event_decode processor: the one place a pipeline
// decodes and validates SpeculaPro event envelopes, shared by the persister
// and the stream evaluator.
package eventdecode
