// Package docsnippets holds the test that compiles every Go snippet of
// README.md and docs/*.md against the packages of this module, so that the
// documentation cannot drift from the API, and Blocks and EnvoyHTTP,
// with which other packages' tests read and check the examples of the
// docs.
//
// A snippet is a whole file (it starts with package), or declarations, or
// statements, which the test wraps in a function returning an error. It
// may leave out its imports and use a few names it does not declare
// (ctx, store, userID, ...): the test imports the packages of the table
// imports and declares the names of the table names, as the snippet uses
// them.
package docsnippets
