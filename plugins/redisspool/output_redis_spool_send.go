package redisspool

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// send is one sender: it takes the oldest buffered entries, parks those that
// waited max_wait, writes the rest and puts back (oldest first) what the
// output refused.
func (s *redisSpool) send() {
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.stopping {
			s.cond.Wait()
		}
		if s.stopping {
			s.mu.Unlock()
			return
		}
		n := min(len(s.queue), sendChunk)
		take := append([]*spoolEntry(nil), s.queue[:n]...)
		s.queue = s.queue[n:]
		for _, e := range take {
			s.bytes -= e.size
		}
		s.inflight += n
		s.mu.Unlock()

		// An entry that waited max_wait is parked without another Kafka
		// try; one the spool refused before tries Kafka again first.
		now := time.Now()
		var expired, fresh []*spoolEntry
		for _, e := range take {
			if now.Sub(e.enq) >= s.wait && !e.unparked {
				expired = append(expired, e)
			} else {
				fresh = append(fresh, e)
			}
		}
		var requeue []*spoolEntry
		if len(expired) > 0 {
			requeue = append(requeue, s.park(expired, fmt.Sprintf("Kafka did not take them within %v", s.wait))...)
		}
		var failed []*spoolEntry
		if len(fresh) > 0 {
			failed = s.write(s.sendCtx, fresh)
		}
		var toPark []*spoolEntry
		for _, e := range failed {
			if time.Since(e.enq) >= s.wait || s.sendCtx.Err() != nil {
				toPark = append(toPark, e)
			} else {
				requeue = append(requeue, e)
			}
		}
		if len(toPark) > 0 {
			requeue = append(requeue, s.park(toPark, fmt.Sprintf("Kafka did not take them within %v", s.wait))...)
		}
		// Kafka and Redis both refused these: they stay in memory (at the
		// front, oldest first) and are tried again, both ways, until one
		// takes them or the process stops (Close loses what is left).
		for _, e := range requeue {
			if time.Since(e.enq) >= s.wait {
				e.unparked = true
			}
		}
		s.putBack(requeue, n)
		if len(failed) > 0 || len(requeue) > 0 {
			select {
			case <-time.After(sendRetryPause):
			case <-s.sendCtx.Done():
			}
		}
	}
}

// putBack ends a sender's turn of n entries: requeue goes back at the front
// of the buffer, oldest first, and a Close waiting for the buffer to drain is
// told when it has.
func (s *redisSpool) putBack(requeue []*spoolEntry, n int) {
	sortByAge(requeue)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(requeue) > 0 {
		s.queue = append(requeue, s.queue...)
		for _, e := range requeue {
			s.bytes += e.size
		}
	}
	s.inflight -= n
	s.bufGauge.Set(int64(len(s.queue) + s.inflight))
	if s.drained != nil && len(s.queue) == 0 && s.inflight == 0 {
		close(s.drained)
		s.drained = nil
	}
	s.cond.Broadcast()
}

// write writes entries to the wrapped output and returns those it refused.
func (s *redisSpool) write(ctx context.Context, entries []*spoolEntry) []*spoolEntry {
	batch := make(service.MessageBatch, len(entries))
	for i, e := range entries {
		batch[i] = e.message()
	}
	err := s.child.WriteBatch(ctx, batch)
	if err == nil {
		return nil
	}
	var berr *service.BatchError
	if errors.As(err, &berr) && berr.IndexedErrors() > 0 {
		// The wrapped output reports per message on the batch it was
		// handed, which holds our messages in our order (OwnedOutput
		// copies the parts, so WalkMessagesIndexedBy cannot trace them
		// back and walks nothing: every failure would pass for a
		// delivery). A walk of another length is not trusted: then
		// everything counts as failed (a delivered one is sent again;
		// storing is idempotent).
		var failed []*spoolEntry
		walked := 0
		berr.WalkMessages(func(i int, _ *service.Message, err error) bool { //nolint:staticcheck // see above
			walked++
			if err != nil && i >= 0 && i < len(entries) {
				failed = append(failed, entries[i])
			}
			return true
		})
		if walked != len(entries) || len(failed) < berr.IndexedErrors() {
			return entries
		}
		return failed
	}
	return entries
}

func sortByAge(es []*spoolEntry) {
	sort.SliceStable(es, func(i, j int) bool { return es[i].enq.Before(es[j].enq) })
}
