// Package event owns the wire format of an event: the versioned JSON
// envelope that every transaction and account event travels in on Kafka
// (sp.txn.ingested, sp.account.events), its Go shape, the one encoder
// (Encode, AppendRecord) and the one decoder (Decode and its variants) that
// the ingest and decision APIs, the persister, the stream and the load
// generator all use, the JSON scanning the APIs split request bodies with
// (AppendMembers, SplitArray, Unquote), the checks of what PostgreSQL's jsonb
// takes (CheckJSON), one tokenizer under all three readers (json_scan.go:
// the checker, the decoder and the splitter read strings, numbers and
// literals alike), the classified errors the persister dead-letters on, and
// the deterministic IDs (transactions, customers, accounts, counterparties)
// that let the persister know every row's key client-side and make a replay
// land on the same rows. codec_differential_test.go holds the encoder and
// decoder to encoding/json's answers. Identifiers inside an envelope are only
// ever encrypted, masked and fingerprinted (package identity); the envelope
// has no field for a clear one.
package event
