// Package eventmsg carries a decoded event envelope on a Benthos message, so
// that the event_decode processor decodes each record once and every later
// step (the persister's output, the stream's feature and rule steps) reads
// the same envelope. The raw bytes stay the message's content: a dead letter
// must leave with them exactly as they arrived.
package eventmsg
