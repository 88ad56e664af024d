package tests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// countingReceiver answers 200 at once and counts what arrives: the
// benchmark's local receiver, whose own ceiling is measured in the same run.
type countingReceiver struct {
	addr string
	n    atomic.Int64
}

func newCountingReceiver(b *testing.B) *countingReceiver {
	r := &countingReceiver{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	r.addr = l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.n.Add(1)
		w.WriteHeader(http.StatusOK)
	})}
	go srv.Serve(l)
	b.Cleanup(func() { _ = srv.Close() })
	return r
}

// BenchmarkWorkerDeliveries: deliveries/s from the PostgreSQL outbox to a
// local receiver with one and with four worker processes, beside the
// receiver's own ceiling in the same run (a Go client posting the same
// bodies straight to it, as many at once as one worker sends: 4 batches of
// 100). Each run queues n deliveries to running workers and times until the
// last is recorded delivered.
func BenchmarkWorkerDeliveries(b *testing.B) {
	n := 30000
	if fullScale() {
		n = 100000
	}
	s := newWorkerStack(b)
	rcv := newCountingReceiver(b)
	ep, _ := s.addEndpoint(b, "http://"+rcv.addr+"/bench")

	// The bodies the worker will send: the payloads as stored.
	ids := s.queueDeliveries(b, ep, n)
	rows, err := s.conn.Query(context.Background(), "SELECT payload::text FROM speculapro.webhook_deliveries")
	if err != nil {
		b.Fatal(err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.conn.Exec(context.Background(), "DELETE FROM speculapro.webhook_deliveries"); err != nil {
		b.Fatal(err)
	}
	_ = ids

	b.ResetTimer()
	ceiling := benchReceiverCeiling(b, "http://"+rcv.addr+"/bench", bodies, 400)
	rcv.n.Store(0)
	results := map[int]float64{}
	for _, workers := range []int{1, 4} {
		var procs []*binProcess
		// SP_TEST_BENCH_CPUPROFILE=<file> saves a 3 s CPU profile of the
		// single worker under load.
		profile := os.Getenv("SP_TEST_BENCH_CPUPROFILE")
		for i := range workers {
			p := newBinProcess(b).named(fmt.Sprintf("bench worker %d", i+1))
			p.start(b, s.env, "run", "--set", "http.address="+p.httpAddr, "--set", "http.debug_endpoints=true", "pipelines/worker.yaml")
			procs = append(procs, p)
		}
		for _, p := range procs {
			waitUntil(b, waitBound, p.name+" to serve /metrics", func() error { _, err := p.scrape(); return err })
		}
		before := rcv.n.Load()
		cpuBefore := procCPU(b, procs)
		start := time.Now()
		s.queueDeliveries(b, ep, n)
		var profiled sync.WaitGroup
		if profile != "" && workers == 1 {
			profiled.Add(1)
			go func() { defer profiled.Done(); saveCPUProfile(b, procs[0], "one worker", profile, 3) }()
		}
		waitUntil(b, 10*time.Minute, "every delivery recorded", func() error {
			if left := s.count(b, "SELECT count(*) FROM speculapro.webhook_deliveries WHERE status = 'pending'"); left > 0 {
				return fmt.Errorf("%d pending", left)
			}
			return nil
		})
		elapsed := time.Since(start)
		cpu := procCPU(b, procs) - cpuBefore
		profiled.Wait()
		results[workers] = float64(n) / elapsed.Seconds()
		var rss int64
		for _, p := range procs {
			rss = max(rss, p.peakRSS(b))
		}
		b.Logf("%d worker(s): %d deliveries in %s = %.0f/s (%d requests arrived); worker CPU %.2f s (%.0f %% of one core); peak RSS %d MB (the largest)",
			workers, n, elapsed.Round(time.Millisecond), results[workers], rcv.n.Load()-before, cpu.Seconds(), 100*cpu.Seconds()/elapsed.Seconds(), rss>>20)
		if workers == 1 {
			// The memory aim (peak RSS ≤ 200 MB) is for every role, at full speed:
			// one worker draining the queue as fast as it can.
			benchSummary(b, fmt.Sprintf("worker peak RSS (%d deliveries, one process)", n), fmt.Sprintf("%.0f MB", float64(rss)/(1<<20)), "", "", "≤ 200 MB")
		}
		for _, p := range procs {
			p.stop(b)
		}
		if _, err := s.conn.Exec(context.Background(), "DELETE FROM speculapro.webhook_deliveries"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.Logf("receiver ceiling (Go client, 400 at once): %.0f/s; 1 worker %.2f of it, 4 workers %.2f", ceiling, results[1]/ceiling, results[4]/ceiling)
	b.ReportMetric(results[1], "deliveries/s-1worker")
	b.ReportMetric(results[4], "deliveries/s-4workers")
	b.ReportMetric(ceiling, "receiver-ceiling/s")
}

// benchReceiverCeiling posts bodies to url from conc goroutines and returns
// requests per second.
func benchReceiverCeiling(b *testing.B, url string, bodies []string, conc int) float64 {
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxIdleConns: conc}}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(bodies)) {
					return
				}
				resp, err := client.Post(url, "application/json", bytes.NewReader([]byte(bodies[i])))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	return float64(len(bodies)) / time.Since(start).Seconds()
}

// procCPU is the CPU time (user and system) the processes used so far.
func procCPU(b *testing.B, procs []*binProcess) time.Duration {
	var ticks int64
	for _, p := range procs {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err != nil {
			b.Fatal(err)
		}
		// Fields after the command's closing parenthesis; utime and stime
		// are the 14th and 15th fields of the line.
		f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}
