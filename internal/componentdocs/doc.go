// Package componentdocs writes docs/components/: one Markdown page per
// component SpeculaPro adds to the engine (inputs, processors, outputs, metrics
// exporters, tracers), rendered from the config spec the component registers,
// plus an index. A field's description, type, default and examples therefore
// come from the code that parses the field and cannot drift from it.
//
// The engine's own components (the pure and io families that plugins/all also
// imports) share the same registry, so the registry alone cannot say which
// components are ours. Registered answers that from the source instead: it
// lists every call to one of the engine's package-level Register functions in
// our module's non-test code. A name we register overrides an engine component
// of the same name, so this also holds when ours shares a name with one of the
// engine's (kafka_franz, prometheus and open_telemetry_collector share names
// with Redpanda Connect's), where subtracting the engine's names would drop it.
//
// The test in this package compares the committed pages with what Pages
// renders and fails on any difference; `make docs` runs it with -update to
// rewrite them.
package componentdocs
