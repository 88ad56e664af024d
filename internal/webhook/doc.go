// Package webhook holds what SpeculaPro's webhooks promise receivers and
// operators, independent of the engine: which URLs may receive deliveries
// (URL, the dialer's address guard), how a delivery is signed (Sign, Verify),
// how a signing secret is made and stored (NewSecret, SealSecret,
// OpenSecret), and the HTTP client that sends (NewClient: no redirects, the
// guard on every connection). The worker's outbox components
// (plugins/outbox) and `speculapro webhook` use it.
//
// # Signature
//
// Every delivery carries
//
//	X-SpeculaPro-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]
//
// where each v1 is hex(HMAC-SHA256(secret, "<t>.<raw body>")), one per secret
// valid at the time of sending: the current one and, during the grace period
// after `speculapro webhook rotate-secret`, the previous one. A receiver
// accepts the delivery when any v1 matches a secret it holds and t is recent
// (Verify's tolerance), and deduplicates on the Idempotency-Key header (the
// event's ID, the same on every attempt).
package webhook
