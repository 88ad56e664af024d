// Package webhook holds what SpeculaPro's webhooks promise receivers and
// operators, independent of the engine: which URLs may receive deliveries
// (URL, the dialer's address guard), how a delivery is signed (Sign,
// SetHeaders, Verify), how a signing secret is made and stored (NewSecret,
// SealSecret, OpenSecret), and the HTTP client that sends (NewClient: no
// redirects, the guard on every connection). The worker's outbox components
// (plugins/outboxsend) and `speculapro webhook` use it.
//
// # Signature
//
// Deliveries are signed as the Standard Webhooks specification describes,
// so receivers verify them with its published libraries:
//
//	webhook-id: <the event's ID, the same on every attempt>
//	webhook-timestamp: <the attempt's Unix seconds>
//	webhook-signature: v1,<base64>[ v1,<base64>]
//
// where each v1 is base64(HMAC-SHA256(key, "<id>.<timestamp>.<raw body>")),
// key being the base64-decoded part of a whsec_ secret, one per secret valid
// at the time of sending: the current one and, during the grace period after
// `speculapro webhook rotate-secret`, the previous one. The ID is signed, so
// a receiver that deduplicates on it cannot be fed a captured delivery under
// a new ID, and the timestamp is, so one replayed later than Tolerance is
// refused. While legacy headers are on the earlier scheme's
// X-SpeculaPro-Signature and Idempotency-Key ride along (SignLegacy).
package webhook
