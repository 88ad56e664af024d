package apirequest

import (
	"errors"
	"sync"

	"github.com/speculapro/speculapro/internal/event"
)

// A request's records and decoded items, in buffers reused between
// requests (the ingest API's allocations are most of its collector's work).

// encode builds the item's message: the envelope as event.Encode writes
// it (event.AppendRecord), encoded once, with the counterparty in its protected
// form (the API protects it while the item is parsed, so no step of the
// pipeline parses the record again). The record is appended to slab, the
// request's one buffer for all of them, when there is one.
func (it *Item) encode(slab *RecordSlab) {
	if slab == nil {
		it.Value = event.AppendRecord(nil, &it.Envelope)
		return
	}
	if cap(slab.cur)-len(slab.cur) < recordRoom {
		// A new chunk rather than a bigger copy of this one: the records
		// already written keep pointing into the old chunk.
		slab.take()
	}
	start := len(slab.cur)
	slab.cur = event.AppendRecord(slab.cur, &it.Envelope)
	it.Value = slab.cur[start:len(slab.cur):len(slab.cur)]
}

// Records are written into chunks of recordChunk bytes, a new one taken when
// less than recordRoom is left (a usual record is under 1 KiB; a longer one
// only grows its chunk).
const (
	recordChunk = 64 << 10
	recordRoom  = 4 << 10
)

// recordChunks are the chunks requests write their records into, reused:
// made afresh, each one zeroed, they are 16 % of the bytes the ingest API
// allocates at the benchmark's load.
var recordChunks = sync.Pool{New: func() any { b := make([]byte, 0, recordChunk); return &b }}

// RecordSlab is one request's records: the chunk being written and every
// chunk taken from recordChunks; and its decoded items, from parsedSlices
// (an item with its envelope is about 600 bytes: 13 % of the bytes
// allocated at the benchmark's load), which the pipeline's messages point
// into (their envelopes) and so are given back with the records.
type RecordSlab struct {
	cur    []byte
	chunks []*[]byte
	parsed *[]ParsedItem
}

// parsedSlices are requests' item slices, reused (up to maxItemsDefault).
var parsedSlices = sync.Pool{New: func() any { s := make([]ParsedItem, 0, MaxItemsDefault); return &s }}

// items returns n zero items, from the pool when n fits.
func (s *RecordSlab) items(n int) []ParsedItem {
	if n > MaxItemsDefault {
		return make([]ParsedItem, n)
	}
	p := parsedSlices.Get().(*[]ParsedItem)
	s.parsed = p
	return (*p)[:n] // zero: release cleared them
}

// take starts a new chunk.
func (s *RecordSlab) take() {
	c := recordChunks.Get().(*[]byte)
	s.chunks = append(s.chunks, c)
	s.cur = (*c)[:0]
}

// Release gives the chunks back for other requests' records. Only once no
// record in them can be read again: the output acknowledged every one
// (Kafka has them, franz-go is done with them), or they never left the
// request. Records still in the output's hands (a timeout, a failed
// write) are left to the collector.
func (s *RecordSlab) Release() {
	for _, c := range s.chunks {
		*c = (*c)[:0]
		recordChunks.Put(c)
	}
	s.chunks, s.cur = nil, nil
	if p := s.parsed; p != nil {
		// Cleared whole: no string, error or envelope of this request is
		// kept alive by the pool, and the next one starts from zero items.
		clear((*p)[:cap(*p)])
		*p = (*p)[:0]
		parsedSlices.Put(p)
		s.parsed = nil
	}
}

// memberSlabs are the requests' buffers of object members (about 15 an
// item), reused between requests.
var memberSlabs = sync.Pool{New: func() any { s := make([]event.Member, 0, 8<<10); return &s }}

// WithID gives the item the ID it was first accepted under, and that
// ID's occurred_at, so a resend of an item that may already be in Kafka is
// the same record (id, occurred_at) the persister stores once.
func (it *Item) WithID(id event.UUID) error {
	at, ok := event.OccurredAtOfID(id)
	if !ok {
		return errors.New("the first ID carries no time")
	}
	it.ID, it.occurredAt = id, at
	it.Envelope.ID, it.Envelope.OccurredAt = id, at
	it.encode(nil)
	return nil
}
