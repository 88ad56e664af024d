package backtest

import (
	"runtime"
	"sync"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/features"
	"github.com/speculapro/speculapro/internal/rules"
)

// evaluator applies batches of the history to the totals and evaluates the
// period's events with the rules under test and the workspace's rules.
type evaluator struct {
	rep      *Report
	o        Options
	programs [2]*rules.Program // by source: files, workspace
	workers  int
	scratch  []rules.Scratch // one per worker
	envs     []*event.Envelope
	found    [][2]outcome // per event of the batch, per source
}

// outcome is what one program found on one event.
type outcome struct {
	hits []rules.Hit
	errs []rules.RuleError
}

func newEvaluator(rep *Report, o Options, wsRules []rules.Rule) (*evaluator, error) {
	ev := &evaluator{rep: rep, o: o, workers: runtime.GOMAXPROCS(0)}
	ev.scratch = make([]rules.Scratch, ev.workers)
	var err error
	if ev.programs[0], err = rules.Compile(o.Rules); err != nil {
		return nil, err
	}
	// Workspace rules that do not compile are left out, as the stream leaves
	// them out (rules.Loader).
	if ev.programs[1], err = rules.Compile(wsRules); err != nil {
		var good []rules.Rule
		for i := range wsRules {
			if _, err := rules.Compile(wsRules[i : i+1]); err == nil {
				good = append(good, wsRules[i])
			}
		}
		if ev.programs[1], err = rules.Compile(good); err != nil {
			return nil, err
		}
	}
	return ev, nil
}

// batch applies rows (in order) and evaluates those of the period.
func (ev *evaluator) batch(mem *features.Memory, rows []*row) error {
	if len(rows) == 0 {
		return nil
	}
	ev.envs = ev.envs[:0]
	for _, r := range rows {
		ev.envs = append(ev.envs, &r.env)
	}
	vals, err := mem.Apply(ev.envs)
	if err != nil {
		return err
	}
	ev.found = append(ev.found[:0], make([][2]outcome, len(rows))...)
	from, to := ev.o.From, ev.o.To
	inPeriod := func(r *row) bool { return !r.env.OccurredAt.Before(from) && r.env.OccurredAt.Before(to) }
	// Each event's evaluation reads only its own envelope and features:
	// the workers split the batch, each with its own scratch, and the
	// figures are counted afterwards, in order, on this goroutine.
	var wg sync.WaitGroup
	for w := range ev.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := &ev.scratch[w]
			for i := w; i < len(rows); i += ev.workers {
				if !inPeriod(rows[i]) {
					continue
				}
				for s, p := range ev.programs {
					h, e := p.EvaluateFeatures(ev.envs[i], vals[i], sc)
					ev.found[i][s] = outcome{hits: h, errs: e}
				}
			}
		}()
	}
	wg.Wait()
	for i, r := range rows {
		if !inPeriod(r) {
			continue
		}
		ev.rep.Events++
		for s := range ev.programs {
			f := &ev.found[i][s]
			for k := range f.hits {
				rr := ev.rep.record(s, &f.hits[k], r, ev.o.Explain)
				if rr != nil && ev.o.Hit != nil {
					ev.o.Hit(rr, &r.env)
				}
			}
			for k := range f.errs {
				ev.rep.ruleError(s, &f.errs[k])
			}
		}
	}
	return nil
}
