package conformance

import "embed"

// Vectors holds the project's own vector files (vectors/*.json), so that
// the sluice command can check a store without a checkout.
//
//go:embed vectors/*.json
var Vectors embed.FS
