package apirequest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
)

func TestTenantShares(t *testing.T) {
	type step struct {
		release bool
		tenant  string
		n       int64
		ok      bool // tryAcquire's answer (ignored for release)
	}
	cases := []struct {
		name    string
		limit   int64
		steps   []step
		tenants int // holding something at the end
	}{
		{"within the share", 10, []step{{false, "a", 4, true}, {false, "a", 6, true}}, 1},
		{"over the share, refused to that tenant only", 10, []step{
			{false, "a", 8, true}, {false, "a", 3, false}, {false, "b", 10, true}, {false, "c", 1, true},
		}, 3},
		{"released room is taken again", 10, []step{
			{false, "a", 10, true}, {false, "a", 1, false}, {true, "a", 10, false}, {false, "a", 10, true},
		}, 1},
		{"larger than the whole share", 10, []step{{false, "a", 11, false}}, 0},
		{"a tenant holding nothing is forgotten", 10, []step{
			{false, "a", 3, true}, {false, "b", 3, true}, {true, "a", 3, false}, {true, "b", 3, false},
		}, 0},
		{"a refusal leaves no entry behind", 5, []step{{false, "a", 6, false}, {false, "b", 6, false}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewTenantShares(c.limit)
			for i, st := range c.steps {
				if st.release {
					s.release(st.tenant, st.n)
					continue
				}
				if got := s.tryAcquire(st.tenant, st.n); got != st.ok {
					t.Errorf("step %d: tryAcquire(%s, %d) = %v, want %v", i, st.tenant, st.n, got, st.ok)
				}
			}
			if got := s.tenants(); got != c.tenants {
				t.Errorf("%d tenants held, want %d", got, c.tenants)
			}
		})
	}
}

func TestShareOf(t *testing.T) {
	cases := []struct {
		total int64
		share float64
		least int64
		want  int64
	}{
		{32 << 20, 0.5, 5 << 20, 16 << 20},
		{32 << 20, 0.25, 5 << 20, 8 << 20},
		{8 << 20, 0.25, 5 << 20, 5 << 20}, // never below the largest body
		{4 << 20, 0.5, 5 << 20, 4 << 20},  // nor above the whole
		{512, 0.25, 1, 128},
		{3, 0.1, 1, 1},
		{10, 1, 1, 10},
	}
	for _, c := range cases {
		if got := ShareOf(c.total, c.share, c.least); got != c.want {
			t.Errorf("shareOf(%d, %v, %d) = %d, want %d", c.total, c.share, c.least, got, c.want)
		}
	}
}

// oneByteReader hands out its bytes one Read at a time, as a body that
// trickles in does.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(b []byte) (int, error) { return o.r.Read(b[:min(1, len(b))]) }

// TestReadAllSizedHoldsWhatArrived: a body holds of the budget what its
// buffer is (one chunk ahead at most), not what it announced; a body that
// does not fit is refused with errBudgetFull and holds nothing once released.
func TestReadAllSizedHoldsWhatArrived(t *testing.T) {
	const limit = 5 << 20
	cases := []struct {
		name          string
		budget        int64
		body          int   // bytes sent
		announced     int64 // Content-Length; -1 none
		trickle       bool
		wantErr       error
		wantHeldUpTo  int64 // the lease holds at most this
		wantHeldLeast int64 // and at least this
	}{
		{"small body, announced", 32 << 20, 300, 300, false, nil, 301, 301},
		{"175 KB body, announced", 32 << 20, 175_000, 175_000, false, nil, 175_001, 175_001},
		{"5 MiB body, announced", 32 << 20, limit, limit, false, nil, limit + 1, limit + 1},
		{"no Content-Length", 32 << 20, 200_000, -1, false, nil, 2 * 200_000, 200_000},
		{"announces 5 MiB, sent 10 bytes so far", 32 << 20, 10, limit, true, io.ErrUnexpectedEOF, 0, 0},
		{"does not fit", 1 << 20, 2 << 20, 2 << 20, false, errBudgetFull, 0, 0},
		{"a small budget", 32 << 10, 100, 100, false, nil, 101, 101},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sem := semaphore.NewWeighted(c.budget)
			lease := &bodyLease{budget: sem}
			var rd io.Reader = bytes.NewReader(bytes.Repeat([]byte("x"), c.body))
			if c.announced > int64(c.body) {
				// A body that stops short of its Content-Length, as
				// net/http reports it.
				rd = io.MultiReader(rd, errReader{io.ErrUnexpectedEOF})
			}
			if c.trickle {
				rd = oneByteReader{rd}
			}
			var held int64
			probe := &probeReader{r: rd, onRead: func() { held = max(held, lease.held) }}
			body, err := readAllSized(probe, c.announced, limit, lease)
			switch {
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			case c.wantErr == nil && (err != nil || len(body) != c.body):
				t.Fatalf("read %d bytes, %v; want %d", len(body), err, c.body)
			}
			if c.trickle && held > bodyChunk {
				t.Errorf("a trickling body held %d bytes, more than one chunk (%d)", held, bodyChunk)
			}
			if c.wantErr == nil && (lease.held > c.wantHeldUpTo || lease.held < c.wantHeldLeast) {
				t.Errorf("lease holds %d bytes, want %d..%d", lease.held, c.wantHeldLeast, c.wantHeldUpTo)
			}
			lease.release()
			if !sem.TryAcquire(c.budget) {
				t.Errorf("the budget is not whole again after release")
			}
		})
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type probeReader struct {
	r      io.Reader
	onRead func()
}

func (p *probeReader) Read(b []byte) (int, error) {
	p.onRead()
	return p.r.Read(b)
}

// TestPacedBody: a body slower than the minimum rate over a window is cut
// off and told so; one at or above it, or that arrives whole within the
// window, is read; a body that stalls is cut off at the window, not at the
// request's deadline.
func TestPacedBody(t *testing.T) {
	const window = time.Second
	cases := []struct {
		name     string
		rate     int64
		chunks   []int // bytes sent every 100 ms
		announce int   // Content-Length beyond what is sent
		wantSlow bool
		wantOK   bool
	}{
		{"all at once", 1000, []int{5000}, 0, false, true},
		{"steady above the rate", 1000, repeat(200, 20), 0, false, true}, // 2,000 B/s for 2 s
		{"a byte a tick", 1000, repeat(1, 30), 0, true, false},           // 10 B/s
		{"stalls after a burst", 1000, append([]int{1500}, repeat(0, 30)...), 1000, true, false},
		{"no minimum", 0, repeat(1, 15), 0, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			total := 0
			for _, n := range c.chunks {
				total += n
			}
			type outcome struct {
				n    int
				err  error
				slow bool
			}
			got := make(chan outcome, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				p := newPacedBody(r.Body, w, c.rate, window, time.Now().Add(time.Minute))
				b, err := readAllSized(p, r.ContentLength, 1<<20, nil)
				got <- outcome{len(b), err, p.tooSlow()}
				p.restore()
				w.WriteHeader(http.StatusNoContent)
			}))
			defer srv.Close()
			conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", total+c.announce)
			for _, n := range c.chunks {
				if _, err := conn.Write(bytes.Repeat([]byte("x"), n)); err != nil {
					break // cut off
				}
				time.Sleep(100 * time.Millisecond)
			}
			var o outcome
			select {
			case o = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("no outcome within 10 s")
			}
			var netErr net.Error
			timedOut := errors.As(o.err, &netErr) && netErr.Timeout()
			switch {
			case c.wantOK && (o.err != nil || o.n != total):
				t.Errorf("read %d of %d bytes: %v", o.n, total, o.err)
			case c.wantSlow && !(timedOut && o.slow):
				t.Errorf("err %v, too slow %v: want cut off for the minimum rate", o.err, o.slow)
			}
			if c.wantOK {
				_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != http.StatusNoContent {
					t.Errorf("answer: %v %v", resp, err)
				}
			}
		})
	}
}

func repeat(n, times int) []int {
	out := make([]int, times)
	for i := range out {
		out[i] = n
	}
	return out
}

// TestTurnTakerRoundRobin: with one turn held, requests that arrive in
// line are let in tenant by tenant, each tenant's in arrival order.
func TestTurnTakerRoundRobin(t *testing.T) {
	cases := []struct {
		name     string
		arrivals string // one letter a request, its tenant
		want     string // the order they are let in
	}{
		{"one tenant: first come, first served", "aaaa", "aaaa"},
		{"a flood beside one request", "hhhhw", "hwhhh"},
		{"three tenants", "aabbc", "abcab"},
		{"a tenant arriving late still gets the next turn", "hhhhhhw", "hwhhhhh"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := NewTurnTaker(1)
			ctx := context.Background()
			if !q.Enter(ctx, "first", time.Second, nil) {
				t.Fatal("the first request waits with no other in")
			}
			let := make(chan string, len(c.arrivals))
			for _, tenant := range c.arrivals {
				// Each waiter owns its turn once in, and gives it back at once.
				go func() {
					if q.Enter(ctx, string(tenant), time.Minute, nil) {
						let <- string(tenant)
						q.Leave()
					}
				}()
				time.Sleep(20 * time.Millisecond) // in line before the next arrives
			}
			q.Leave()
			got := ""
			for range c.arrivals {
				got += <-let
			}
			if got != c.want {
				t.Errorf("let in %s, want %s", got, c.want)
			}
			if !q.Enter(ctx, "last", time.Second, nil) || q.Enter(ctx, "other", 10*time.Millisecond, nil) {
				t.Error("the turn was not given back whole")
			}
		})
	}
}

// TestTurnTakerGivesUp: a request that stops waiting leaves the line, and a
// turn handed to it as it gave up goes to the next in line.
func TestTurnTakerGivesUp(t *testing.T) {
	q := NewTurnTaker(1)
	ctx := context.Background()
	q.Enter(ctx, "a", time.Second, nil)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if q.Enter(cctx, "b", time.Minute, nil) {
		t.Error("a request whose client gave up was let in")
	}
	stop := make(chan struct{})
	close(stop)
	if q.Enter(ctx, "b", time.Minute, stop) {
		t.Error("a request was let in after stop")
	}
	if q.Enter(ctx, "b", 20*time.Millisecond, nil) {
		t.Error("a request was let in beyond the turns")
	}
	q.Leave()
	if !q.Enter(ctx, "c", 10*time.Millisecond, nil) {
		t.Error("the turn given back did not reach the next request")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) != 0 || len(q.queues) != 0 {
		t.Errorf("lines left behind: %v %v", q.order, q.queues)
	}
}
