package ingestapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

// TestBatchAnswerIsMarshal: a batch answer is json.Marshal's bytes, for
// every kind of result and text needing escapes.
func TestBatchAnswerIsMarshal(t *testing.T) {
	for _, resp := range []batchResponse{
		{},
		{Results: []itemResult{}},
		{Accepted: 2, Duplicate: 1, Rejected: 1, Retry: 1, Conflict: 1, Results: []itemResult{
			{Index: 0, ExternalID: "t-1", Status: statusAccepted, ID: "0193f5a2-7c00-7abc-8def-0123456789ab"},
			{Index: 1, ExternalID: `<a href="x">&\u2028` + "\u2029\x01\t\xff é", Status: statusDuplicate, ID: "0193f5a2-7c00-7abc-8def-0123456789ab"},
			{Index: 2, Status: statusRejected, Errors: []apirequest.FieldError{{Field: "items[2].amount", Message: "required"}, {Field: "items[2].x<", Message: `want "a"`}}},
			{Index: 3, ExternalID: "t-4", Status: statusRetry, ID: "0193f5a2-7c00-7abc-8def-0123456789ac", Message: "send it again & again"},
			{Index: 4, ExternalID: "t-5", Status: statusConflict, ID: "x", Message: msgConflict, Errors: []apirequest.FieldError{}},
		}},
	} {
		want, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendBatchResponse(nil, &resp); !bytes.Equal(got, want) {
			t.Errorf("answer\n%s\njson.Marshal\n%s", got, want)
		}
	}
}

// A request's record buffers are reused only when no record in them can
// be read again: deliver is settled when the pipeline acknowledged every
// message, or never took the batch, and not settled while the output may
// still hold the records (a failed write, no acknowledgement in time).
func TestRecordBuffersReusedOnlyOnceAcknowledged(t *testing.T) {
	for _, tt := range []struct {
		name string
		ack  func(*job) // nil: nobody takes the batch
		want bool
	}{
		{"acknowledged", func(j *job) { j.done <- nil }, true},
		{"failed", func(j *job) { j.done <- errors.New("writing to topic sp.txn.ingested: broken") }, false},
		{"no acknowledgement in time", func(*job) {}, false},
		{"not taken", nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &ingestAPI{jobs: make(chan *job), closing: make(chan struct{}), ackTimeout: 200 * time.Millisecond}
			a.Log = service.MockResources().Logger()
			if tt.ack != nil {
				go func() { tt.ack(<-a.jobs) }()
			}
			items := []*apirequest.Item{{Index: 0, Value: []byte(`{}`), Key: "k"}}
			results := make([]itemResult, 1)
			if got := a.deliver(event.KindTransaction, "txn.ingested", items, results); got != tt.want {
				t.Errorf("settled %v, want %v (answered %s)", got, tt.want, results[0].Status)
			}
		})
	}
}
