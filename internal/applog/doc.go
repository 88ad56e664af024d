// Package applog owns how SpeculaPro's log lines look. The documentation
// (docs/operations.md) quotes lines such as
//
//	level=WARN msg="persist: sent undecodable records to dead-letter topic" count=3
//
// so lines are logfmt with upper-case levels, and a line's own fields (count,
// rows, err, backoff) come right after msg, before the engine's location fields
// (@service, label, path, stream) that tell which component spoke. The engine's
// own logrus logger would print level=warning with fields sorted by name; the
// binary turns that logger off by default and tees every engine log line here.
package applog
