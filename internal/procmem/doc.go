// Package procmem owns the Go runtime's memory settings of a speculapro
// process: the soft memory limit and the collector's GOGC. Each pipeline
// states its role's settings in its input's process_memory field (so the
// YAML, `speculapro lint` and the settings table show them, and a
// pipeline's file name plays no part); a process that runs several
// pipelines takes the largest limit, follows the live heap when any of them
// asks, and the lowest GOGC stated. GOMEMLIMIT and GOGC in the environment
// replace them: the runtime applied those at start.
package procmem
