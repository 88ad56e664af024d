package pgrulehits

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// evaluations counts a batch's events per set of rules they were evaluated
// against (rule_eval's metadata `rule_eval.evaluated`, one shared value per
// set in force): a handful of map entries per batch, expanded to one row
// per rule version only when written.
type evaluations map[*rules.Evaluated]int64

// add counts msg against the rules rule_eval evaluated it on; a replay
// rule_eval left alone (its results are stored already) carries none and
// is not counted twice.
func (e evaluations) add(msg *service.Message) {
	v, ok := msg.MetaGetMut(metaRuleEval)
	if !ok {
		return
	}
	meta, _ := v.(map[string]any)
	if ev, ok := meta["evaluated"].(*rules.Evaluated); ok && ev != nil {
		e[ev]++
	}
}

// evaluationRows is what one batch adds to speculapro.rule_evaluations, one
// entry per rule version, in key order (two writers then lock the rows in
// the same order and cannot deadlock).
type evaluationRows struct {
	ws, rules []event.UUID
	versions  []int32
	shadow    []bool
	events    []int64
}

func (e evaluations) rows() evaluationRows {
	type key struct {
		ws, rule event.UUID
		version  int32
	}
	sums := map[key]int64{}
	shadow := map[key]bool{}
	for ev, n := range e {
		for _, r := range ev.Rules {
			k := key{r.WorkspaceID, r.ID, int32(r.Version)}
			sums[k] += n
			shadow[k] = r.Shadow()
		}
	}
	keys := make([]key, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(slices.Compare(a.ws[:], b.ws[:]), slices.Compare(a.rule[:], b.rule[:]), cmp.Compare(a.version, b.version))
	})
	var out evaluationRows
	for _, k := range keys {
		out.ws, out.rules, out.versions = append(out.ws, k.ws), append(out.rules, k.rule), append(out.versions, k.version)
		out.shadow, out.events = append(out.shadow, shadow[k]), append(out.events, sums[k])
	}
	return out
}

// upsertEvaluations adds a batch's counts to the current hour's. The join
// with rules drops a rule deleted since it was evaluated, as the hits'
// insert does.
const upsertEvaluations = `
INSERT INTO speculapro.rule_evaluations AS e (workspace_id, rule_id, rule_version, hour, shadow, events)
SELECT i.ws, i.rule, i.version, date_trunc('hour', now(), 'UTC'), i.shadow, i.events
  FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::bool[], $5::bigint[]) WITH ORDINALITY AS i(ws, rule, version, shadow, events, n)
  JOIN speculapro.rules r ON r.id = i.rule AND r.workspace_id = i.ws
 ORDER BY i.n
    ON CONFLICT (workspace_id, rule_id, rule_version, hour) DO UPDATE SET events = e.events + excluded.events`

// writeEvaluationsAndProgress records, with the batch's hits, how many
// events each rule version was evaluated on (a hit rate's denominator,
// exact because it commits or rolls back with the hits) and how far each
// partition is stored: the two statements go in one round trip.
func writeEvaluationsAndProgress(ctx context.Context, tx pgx.Tx, r evaluationRows, p partitionProgress) error {
	if len(r.ws) == 0 {
		return writeProgress(ctx, tx, p)
	}
	if len(p.topics) == 0 {
		if _, err := tx.Exec(ctx, upsertEvaluations, r.ws, r.rules, r.versions, r.shadow, r.events); err != nil {
			return fmt.Errorf("counting the events evaluated by %d rule versions: %w", len(r.ws), err)
		}
		return nil
	}
	var b pgx.Batch
	b.Queue(upsertEvaluations, r.ws, r.rules, r.versions, r.shadow, r.events)
	b.Queue(upsertProgress, p.topics, p.partitions, p.offsets)
	res := tx.SendBatch(ctx, &b)
	if _, err := res.Exec(); err != nil {
		_ = res.Close()
		return fmt.Errorf("counting the events evaluated by %d rule versions: %w", len(r.ws), err)
	}
	if _, err := res.Exec(); err != nil {
		_ = res.Close()
		return fmt.Errorf("recording the progress of %d partitions: %w", len(p.topics), err)
	}
	if err := res.Close(); err != nil {
		return fmt.Errorf("recording the progress of %d partitions: %w", len(p.topics), err)
	}
	return nil
}
