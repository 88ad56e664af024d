package tests

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A persister connected as speculapro_app would be blocked by row-level
// security on every batch: it must refuse to start, with the documented line,
// before it reads (and so commits) anything — alone and as a stream of
// `speculapro streams`, as `speculapro dev` runs it.
func TestPersistRefusesToStartAsAppRole(t *testing.T) {
	t.Parallel()
	db, k, conn, ws := newPersistFixture(t)
	var recs []*kgo.Record
	for n := range 20 {
		key, val, _ := persistTxn(t, ws, n, nil)
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: val})
	}
	k.produceTo(t, "txn.ingested", recs...)

	modes := []struct {
		name string
		args func(p *binProcess) []string
	}{
		{"run", func(p *binProcess) []string { return p.runArgs("pipelines/persist.yaml") }},
		{"streams", func(*binProcess) []string {
			return []string{"streams", "-o", "config/observability.yaml", "pipelines/persist.yaml", "pipelines/persist-events.yaml"}
		}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			p := newBinProcess(t)
			p.start(t, persistEnv(k, db.AppURL), mode.args(p)...)
			start := time.Now()
			requireRoleRefusal(t, p)
			t.Logf("refused after %s", time.Since(start).Round(time.Millisecond))
		})
	}
	if n := k.committedOffsets(t, k.group); n != 0 {
		t.Errorf("group %s committed offsets (sum %d): the refused persister read", k.group, n)
	}
	if n := k.committedOffsets(t, k.group+"-events"); n != 0 {
		t.Errorf("group %s-events committed offsets (sum %d)", k.group, n)
	}
	if n := persistCount(t, conn, "SELECT count(*) FROM speculapro.transactions"); n != 0 {
		t.Errorf("%d transactions stored by a persister that must not start", n)
	}
}
