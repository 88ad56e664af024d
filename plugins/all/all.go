// Package all imports every SpeculaPro component (one package each), and the engine's own
// pure and io components, so that one blank import registers them all.
package all

import (
	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"

	_ "github.com/speculapro/speculapro/plugins/caseapi"
	_ "github.com/speculapro/speculapro/plugins/counterpartyfingerprint"
	_ "github.com/speculapro/speculapro/plugins/decisionapi"
	_ "github.com/speculapro/speculapro/plugins/eventdecode"
	_ "github.com/speculapro/speculapro/plugins/featureupdate"
	_ "github.com/speculapro/speculapro/plugins/ingestapi"
	_ "github.com/speculapro/speculapro/plugins/kafkafranz"
	_ "github.com/speculapro/speculapro/plugins/opentelemetrycollector"
	_ "github.com/speculapro/speculapro/plugins/outboxclaim"
	_ "github.com/speculapro/speculapro/plugins/outboxsend"
	_ "github.com/speculapro/speculapro/plugins/pgcopyupsert"
	_ "github.com/speculapro/speculapro/plugins/pgpartitions"
	_ "github.com/speculapro/speculapro/plugins/pgrulehits"
	_ "github.com/speculapro/speculapro/plugins/prometheus"
	_ "github.com/speculapro/speculapro/plugins/redisspool"
	_ "github.com/speculapro/speculapro/plugins/ruleeval"
)
