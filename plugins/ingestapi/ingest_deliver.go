package ingestapi

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
)

// deliver hands items to the pipeline as one batch and sets each one's
// result from the acknowledgement. It waits at most ackTimeout, whatever
// the client does: an answer must not be given before the ack, and an ack
// must be recorded even if nobody reads the answer. Account events pass
// through account_event_processors first. settled is false when the
// output may still read the records: it has them and has not acknowledged
// all of them (a timeout, a failed write); their buffers are then not
// reused.
func (a *ingestAPI) deliver(kind event.Kind, topic string, items []*apirequest.Item, results []itemResult) (settled bool) {
	batch := make(service.MessageBatch, len(items))
	topicValue := any(topic) // boxed once a request, not once a message
	for i, it := range items {
		m := service.NewMessage(it.Value)
		m.MetaSetMut("ingest_topic", topicValue)
		m.MetaSetMut("ingest_key", it.Key)
		// The envelope rides along, so a processor (feature_update, for
		// account events) reads it instead of parsing the record again; it
		// also tells which item a failed message is (failedItems).
		batch[i] = eventmsg.With(m, &it.Envelope)
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.ackTimeout)
	defer cancel()

	retryAll := func(msg string) {
		for _, it := range items {
			results[it.Index].Status, results[it.Index].Message = statusRetry, msg
		}
	}
	if kind == event.KindAccountEvent && len(a.accountProcs) > 0 {
		var err error
		if batch, err = a.processAccountEvents(ctx, batch); err != nil {
			retryAll(fmt.Sprintf("the pipeline did not take the items within %v; send them again", a.ackTimeout))
			return true
		}
	}
	if len(batch) == 0 {
		// The processors dropped every item, which the pipeline's
		// processors did by acknowledging them: nothing to write.
		a.answerDelivered(nil, items, results)
		return true
	}
	j := &job{batch: batch, done: make(chan error, 1)}
	select {
	case a.jobs <- j:
	case <-ctx.Done():
		retryAll(fmt.Sprintf("the pipeline did not take the items within %v; send them again", a.ackTimeout))
		return true
	case <-a.closing:
		retryAll("the ingest API is shutting down; send the items again")
		return true
	}
	var ackErr error
	select {
	case ackErr = <-j.done:
	case <-ctx.Done():
		retryAll(fmt.Sprintf("Kafka did not confirm the items within %v; send them again", a.ackTimeout))
		return false
	}
	a.answerDelivered(ackErr, items, results)
	return ackErr == nil
}

// answerDelivered sets each delivered item's result from the pipeline's
// acknowledgement.
func (a *ingestAPI) answerDelivered(ackErr error, items []*apirequest.Item, results []itemResult) {
	failed := failedItems(ackErr, items)
	for i, it := range items {
		res := &results[it.Index]
		err, bad := failed[i]
		var reason string
		var rejected bool
		if bad {
			reason, rejected = strings.CutPrefix(err.Error(), iaRejectPrefix)
			if !rejected {
				reason, rejected = strings.CutPrefix(err.Error(), iaRejectErroredPrefix)
			}
		}
		switch {
		case !bad:
			res.Status = statusAccepted
		case rejected:
			res.Status = statusRejected
			res.Errors = []apirequest.FieldError{{Field: apirequest.ItemPath(it.Index), Message: reason}}
			res.ID = ""
		default:
			a.Log.Debugf("ingest_api: an item was not taken by Kafka: %v", err)
			res.Status, res.Message = statusRetry, "not in Kafka; send it again"
		}
	}
}

// processAccountEvents runs account_event_processors on a request's
// account events: one batch out, as the pipeline's processors would hand
// the output (a message a processor failed carries its error, which
// reject_errored answers rejected). The error is only ctx's: the
// processors mark their own failures on the messages.
func (a *ingestAPI) processAccountEvents(ctx context.Context, batch service.MessageBatch) (service.MessageBatch, error) {
	out, err := service.ExecuteProcessors(ctx, a.accountProcs, batch)
	if err != nil {
		return nil, fmt.Errorf("running the account-event processors: %w", err)
	}
	if len(out) == 1 {
		return out[0], nil
	}
	var flat service.MessageBatch
	for _, b := range out {
		flat = append(flat, b...)
	}
	return flat, nil
}

// failedItems maps an acknowledgement's error to the items it failed, by
// index into items. A *service.BatchError names the failed messages of the
// batch the output was given; each carries its item's envelope, which says
// which item it is (instead of a batch Indexer, which tags and copies every
// message of every request for the rare failure). A walk that does not
// account for every item, or a failed message that is not one of ours,
// fails them all: retry is always safe.
func failedItems(ackErr error, items []*apirequest.Item) map[int]error {
	failed := map[int]error{}
	if ackErr == nil {
		return failed
	}
	all := func() map[int]error {
		for i := range items {
			failed[i] = ackErr
		}
		return failed
	}
	var berr *service.BatchError
	if !errors.As(ackErr, &berr) || berr.IndexedErrors() == 0 {
		return all()
	}
	index := make(map[*event.Envelope]int, len(items))
	for i, it := range items {
		index[&it.Envelope] = i
	}
	walked, ours := 0, true
	//nolint:staticcheck // walks the output's batch; the envelope, not the position, names the item
	berr.WalkMessages(func(_ int, m *service.Message, err error) bool {
		walked++
		if err == nil {
			return true
		}
		env, ok := eventmsg.Attached(m)
		i, found := index[env]
		if !ok || !found {
			ours = false
			return false
		}
		failed[i] = err
		return true
	})
	if !ours || walked != len(items) {
		clear(failed)
		return all()
	}
	return failed
}
