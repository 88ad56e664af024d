// Package docguard keeps the repository speaking of the product only, and its
// Markdown pages linked to things that exist. It has two detectors, each a
// pure function over one file's text so that a table-driven test can prove it
// catches what it should:
//
//   - ScanWords finds development history where a user would read it:
//     numbered work sessions, issue numbers or an issue referred to without
//     one, a specification cited instead of explained, commit hashes given
//     as a reason, a figure's history ("was N, now M"), a shared folder
//     outside the repository, and a Markdown document named that the
//     repository does not ship.
//   - ScanLinks finds every relative link of a Markdown page, with its
//     #anchor, and Anchors computes the anchors a page offers by the code
//     host's rules (GitHub's: lower-case, punctuation dropped, spaces to '-',
//     repeated headings numbered -1, -2, …, explicit <a id> and <a name>);
//     Repo.Resolve holds a link to a tracked file or folder and its anchor
//     to one the page offers.
//
// The tree-wide tests in this package run both over every tracked file
// (`git ls-files`), in `make test`, without any service.
package docguard
