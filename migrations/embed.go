package migrations

import "embed"

// FS holds every migration file, named NNNNN_name.sql, at its root.
//
//go:embed *.sql
var FS embed.FS
