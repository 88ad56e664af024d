package pgcopyupsert

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/pgretry"
)

// deadLetter is one record to park.
type deadLetter struct {
	index   int    // in the batch
	code    string // SQLSTATE, for rows the database refused
	message string
}

// sendDeadLetters hands the batch's dead letters to the dead-letter output,
// retrying until it takes them, then logs and counts them: the undecodable
// ones (no code) and the rows the database refused (with their codes).
func (o *pgCopyUpsert) sendDeadLetters(ctx context.Context, batch service.MessageBatch, dead []deadLetter, fault *pgretry.Batch) error {
	if len(dead) == 0 {
		return nil
	}
	start := time.Now()
	letters := make(service.MessageBatch, len(dead))
	for j, d := range dead {
		letters[j] = deadLetterMessage(batch[d.index], d)
	}
	err := fault.Keep(ctx, len(letters), func(ctx context.Context) error {
		if err := o.deadLetter.WriteBatch(ctx, letters); err != nil {
			return fmt.Errorf("sending %d dead letters: %w", len(letters), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	o.m.stage.Timing(time.Since(start).Nanoseconds(), o.table, "dead_letter")

	var undecodable int
	var codes []string
	for _, d := range dead {
		if d.code == "" {
			undecodable++
		} else if !slices.Contains(codes, d.code) {
			codes = append(codes, d.code)
		}
	}
	if undecodable > 0 {
		o.m.deadLetters.Incr(int64(undecodable), o.table, "undecodable")
		applog.With(o.log, "count", undecodable).Warn(logUndecodable)
	}
	if rejected := len(dead) - undecodable; rejected > 0 {
		slices.Sort(codes)
		o.m.deadLetters.Incr(int64(rejected), o.table, "rejected")
		applog.With(o.log, "count", rejected, "codes", strings.Join(codes, ",")).Warn(logRejected)
	}
	return nil
}

// deadLetterMessage is a copy of msg, content and metadata untouched, with
// where it came from and why it was parked.
func deadLetterMessage(msg *service.Message, d deadLetter) *service.Message {
	m := msg.Copy()
	m.SetError(nil)
	topic, _ := m.MetaGet("kafka_topic")
	partition, _ := m.MetaGet("kafka_partition")
	offset, _ := m.MetaGet("kafka_offset")
	if topic != "" || partition != "" || offset != "" {
		m.MetaSetMut(metaSourceOffset, topic+"/"+partition+"/"+offset)
	}
	if d.code != "" {
		m.MetaSetMut(metaErrorCode, d.code)
	}
	m.MetaSetMut(metaErrorMessage, strings.TrimSpace(d.message))
	return m
}
