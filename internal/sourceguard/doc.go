// Package sourceguard keeps every Go file and function small enough for a
// reader to hold: no non-test file over MaxFileLines lines and no function
// over MaxFuncLines lines unless a reason is written beside it. Its detector,
// Scan, is a pure function over one file's source so that a table-driven test
// can prove what it catches; the tree-wide test runs it over every tracked
// non-test Go file (`git ls-files`), in `make test`, without any service.
//
// A function kept long on purpose carries the reason in the comment block
// directly above it (its doc comment), on a line of the form
//
//	// long: <reason in at least three words>
//
// Generated files (a "Code generated ... DO NOT EDIT." line before the
// package clause) are exempt.
package sourceguard
