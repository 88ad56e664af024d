// Package all imports every SpeculaPro plugin family, and the engine's own
// pure and io components, so that one blank import registers them all.
package all

import (
	_ "github.com/redpanda-data/benthos/v4/public/components/io"
	_ "github.com/redpanda-data/benthos/v4/public/components/pure"
	_ "github.com/speculapro/speculapro/plugins/api"
	_ "github.com/speculapro/speculapro/plugins/event"
	_ "github.com/speculapro/speculapro/plugins/identity"
	_ "github.com/speculapro/speculapro/plugins/kafka"
	_ "github.com/speculapro/speculapro/plugins/observe"
	_ "github.com/speculapro/speculapro/plugins/outbox"
	_ "github.com/speculapro/speculapro/plugins/postgres"
	_ "github.com/speculapro/speculapro/plugins/redis"
	_ "github.com/speculapro/speculapro/plugins/rules"
)
