package apirequest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// Sentinel errors of the request budgets.
var (
	// errBudgetFull: the process-wide budget (body bytes of the ingest API,
	// decisions being worked on) has no room; answered 503.
	errBudgetFull = errors.New("the API's budget is full")
	// errBodyTooSlow: a body arrived slower than the minimum rate over a
	// whole window; answered 408.
	errBodyTooSlow = errors.New("the request body arrived too slowly")
)

// bodyChunk is the least a request body's buffer grows by, and so the most a
// body that has sent nothing yet holds of the in-flight budget.
const bodyChunk = 64 << 10

// tenantShares bounds what each tenant (a workspace, an API key) holds of a
// budget shared by all: body bytes in flight for the ingest API, decisions
// being worked on for the decision API. Each tenant gets a semaphore of the
// same size when it first holds something; it is dropped when the tenant
// holds nothing, so the map follows the tenants active now, not every one
// ever seen. Safe for concurrent use.
type tenantShares struct {
	limit int64
	mu    sync.Mutex
	held  map[string]*tenantHold
}

// tenantHold is one tenant's semaphore and how many holdings use it.
type tenantHold struct {
	sem   *semaphore.Weighted
	users int
}

func NewTenantShares(limit int64) *tenantShares {
	return &tenantShares{limit: limit, held: map[string]*tenantHold{}}
}

// tryAcquire takes n of tenant's share without waiting: false when the
// tenant's holdings and n together exceed the share.
func (s *tenantShares) tryAcquire(tenant string, n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[tenant]
	if h == nil {
		h = &tenantHold{sem: semaphore.NewWeighted(s.limit)}
		s.held[tenant] = h
	}
	if !h.sem.TryAcquire(n) {
		if h.users == 0 {
			delete(s.held, tenant)
		}
		return false
	}
	h.users++
	return true
}

// acquire takes n of tenant's share, waiting for it (first come, first
// served) until ctx is done: false then. Waiting holds nothing, so a
// tenant's requests beyond its share wait in line without costing the
// others anything.
func (s *tenantShares) acquire(ctx context.Context, tenant string, n int64) bool {
	s.mu.Lock()
	h := s.held[tenant]
	if h == nil {
		h = &tenantHold{sem: semaphore.NewWeighted(s.limit)}
		s.held[tenant] = h
	}
	h.users++ // a waiter keeps the entry, so it is the one released to
	s.mu.Unlock()
	if h.sem.TryAcquire(n) || h.sem.Acquire(ctx, n) == nil {
		return true
	}
	s.mu.Lock()
	if h.users--; h.users == 0 {
		delete(s.held, tenant)
	}
	s.mu.Unlock()
	return false
}

// acquireWithin is acquire waiting at most wait beyond ctx; the deadline's
// context (a timer) is made only when the share is full, so a request that
// finds room pays for no timer.
func (s *tenantShares) acquireWithin(ctx context.Context, tenant string, n int64, wait time.Duration) bool {
	if s.tryAcquire(tenant, n) {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return s.acquire(ctx, tenant, n)
}

// release gives back n that tryAcquire or acquire took for tenant.
func (s *tenantShares) release(tenant string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[tenant]
	h.sem.Release(n)
	if h.users--; h.users == 0 {
		delete(s.held, tenant)
	}
}

// tenants is how many tenants hold something (for tests).
func (s *tenantShares) tenants() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// ShareOf is the part of total a share (0 < share ≤ 1) gives one tenant,
// never below least: a tenant can always have its largest request in flight.
func ShareOf(total int64, share float64, least int64) int64 {
	return min(total, max(int64(float64(total)*share), least))
}

// bodyLease is what one request body holds of the in-flight byte budget: it
// grows as the body's buffer does, so a body holds what has arrived (at most
// bodyChunk or its size again ahead), never what it announced. Not safe for
// concurrent use: one request's.
type bodyLease struct {
	budget *semaphore.Weighted // nil: no budget
	held   int64
}

// grow takes n more bytes of the budget: errBudgetFull when it has no room.
func (l *bodyLease) grow(n int64) error {
	if l == nil || l.budget == nil {
		return nil
	}
	if !l.budget.TryAcquire(n) {
		return errBudgetFull
	}
	l.held += n
	return nil
}

// release gives back everything the lease holds.
func (l *bodyLease) release() {
	if l == nil || l.budget == nil || l.held == 0 {
		return
	}
	l.budget.Release(l.held)
	l.held = 0
}

// readAllSized reads rd to EOF (at most limit bytes: rd enforces it) into one
// buffer grown in steps that lease holds first: bodyChunk at least, doubling,
// and exactly the announced size plus one when there is one, so a body of
// the size it announced is read without a last growth (and its EOF without
// another). The buffer is the request's alone and never reused: the ingest
// API's items read their strings and metadata from it in place (bodyText).
func readAllSized(rd io.Reader, contentLength, limit int64, lease *bodyLease) ([]byte, error) {
	want := limit + 1
	if contentLength >= 0 && contentLength <= limit {
		want = contentLength + 1
	}
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			next := min(want, max(bodyChunk, 2*int64(cap(buf))))
			if next <= int64(cap(buf)) {
				// Longer than announced: rd ends it as its framing says.
				next = int64(cap(buf)) + bodyChunk
			}
			if err := lease.grow(next - int64(cap(buf))); err != nil {
				return nil, err
			}
			grown := make([]byte, len(buf), next)
			copy(grown, buf)
			buf = grown
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case errors.Is(err, io.EOF):
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
}

// pacedBody enforces a minimum arrival rate on a request body through the
// connection's read deadline: within every window at least rate × window
// bytes must arrive (the window restarts each time they have), and never
// later than the whole request's deadline. A client that stalls, or sends a
// byte a second, is cut off one window after it fell behind instead of
// holding its connection and buffer until the request's deadline.
type pacedBody struct {
	rd       io.Reader
	rc       *http.ResponseController
	rate     int64 // bytes a second; 0: no minimum
	window   time.Duration
	whole    time.Time // the request's deadline
	perWin   int64     // rate × window
	n, markN int64     // bytes read, and at the window's start
	markAt   time.Time
	deadline time.Time // as last set on the connection
	paced    bool      // the deadline set is the window's, not the request's
}

func newPacedBody(rd io.Reader, w http.ResponseWriter, rate int64, window time.Duration, whole time.Time) *pacedBody {
	return &pacedBody{
		rd: rd, rc: http.NewResponseController(w), rate: rate, window: window, whole: whole,
		perWin: int64(float64(rate) * window.Seconds()), markAt: time.Now(),
	}
}

func (p *pacedBody) Read(b []byte) (int, error) {
	if p.rate > 0 {
		now := time.Now()
		if p.n-p.markN >= p.perWin {
			p.markAt, p.markN = now, p.n
		}
		d, paced := p.whole, false
		if w := p.markAt.Add(p.window); w.Before(d) {
			d, paced = w, true
		}
		if !d.Equal(p.deadline) {
			// A connection that cannot take a deadline (none here: HTTP/1.1)
			// keeps the server's ReadTimeout.
			_ = p.rc.SetReadDeadline(d)
			p.deadline, p.paced = d, paced
		}
	}
	n, err := p.rd.Read(b)
	p.n += int64(n)
	return n, err
}

// restore puts the request's own deadline back once the body is read: the
// server's read of the idle connection, while the request is answered,
// cancels the request when a deadline runs out.
func (p *pacedBody) restore() {
	if p.paced {
		_ = p.rc.SetReadDeadline(p.whole)
		p.deadline, p.paced = p.whole, false
	}
}

// tooSlow reports whether the read deadline that ran out was the minimum
// rate's rather than the whole request's.
func (p *pacedBody) tooSlow() bool { return p.paced }

// TurnTaker hands out a fixed number of turns (requests worked on at once)
// to tenants waiting for one: a turn that comes free goes to the tenant next
// in round-robin order among those waiting, and within a tenant to its
// longest waiting request. A tenant with a hundred requests in line delays
// another tenant's next request by one turn, not by a hundred. Safe for
// concurrent use.
type TurnTaker struct {
	mu     sync.Mutex
	free   int
	queues map[string][]chan struct{} // each waiting tenant's requests, oldest first
	order  []string                   // the waiting tenants, next to be served first
}

func NewTurnTaker(turns int) *TurnTaker {
	return &TurnTaker{free: turns, queues: map[string][]chan struct{}{}}
}

// Enter waits until tenant's request may be worked on: false when ctx is
// done, wait ran out or stop was closed first.
func (q *TurnTaker) Enter(ctx context.Context, tenant string, wait time.Duration, stop <-chan struct{}) bool {
	q.mu.Lock()
	if q.free > 0 && len(q.order) == 0 {
		q.free--
		q.mu.Unlock()
		return true
	}
	// Buffered: leave hands the turn over without waiting for the waiter.
	turn := make(chan struct{}, 1)
	if len(q.queues[tenant]) == 0 {
		q.order = append(q.order, tenant)
	}
	q.queues[tenant] = append(q.queues[tenant], turn)
	q.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-turn:
		return true
	case <-ctx.Done():
	case <-timer.C:
	case <-stop:
	}
	q.mu.Lock()
	inLine := q.remove(tenant, turn)
	q.mu.Unlock()
	if !inLine {
		// The turn was handed over as the wait ended: pass it on.
		q.Leave()
	}
	return false
}

// remove takes turn out of tenant's line; false when it is no longer there
// (handed over). The caller holds mu.
func (q *TurnTaker) remove(tenant string, turn chan struct{}) bool {
	line := q.queues[tenant]
	for i, c := range line {
		if c != turn {
			continue
		}
		line = append(line[:i:i], line[i+1:]...)
		if len(line) > 0 {
			q.queues[tenant] = line
			return true
		}
		delete(q.queues, tenant)
		for j, t := range q.order {
			if t == tenant {
				q.order = append(q.order[:j:j], q.order[j+1:]...)
				break
			}
		}
		return true
	}
	return false
}

// Leave gives a turn back: to the next waiting tenant's oldest request, or
// to the free turns when nobody waits.
func (q *TurnTaker) Leave() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		q.free++
		return
	}
	tenant := q.order[0]
	q.order = q.order[1:]
	line := q.queues[tenant]
	line[0] <- struct{}{}
	if len(line) > 1 {
		q.queues[tenant] = line[1:]
		q.order = append(q.order, tenant)
	} else {
		delete(q.queues, tenant)
	}
}
