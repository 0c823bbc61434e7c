package conformance

import (
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestFormatDocCoversRunner checks FORMAT.md against the runner: every
// operation, error code and configuration rule the runner knows is written
// in the document, in backquotes or as a JSON string. The LIMITER's
// policies and fields are internal/policyspec's table, which its tests
// check the document against.
func TestFormatDocCoversRunner(t *testing.T) {
	doc, err := os.ReadFile("FORMAT.md")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, table := range []opTable{bucketOps, limiterOps, rateLimiterOps, smoothOps, timeLimiterOps} {
		for op := range table.ops {
			names = append(names, op)
		}
	}
	names = append(names, errorCodes...)
	for s := range strategies {
		names = append(names, s)
	}
	for _, r := range []sluice.Rule{
		sluice.RuleNonPositiveCapacity, sluice.RuleNonPositiveRefillTokens, sluice.RuleNonPositivePeriod,
		sluice.RuleRefillRateTooHigh, sluice.RuleNegativeInitialTokens, sluice.RuleNegativeFirstRefill,
		sluice.RuleAdaptiveWithManual, sluice.RuleNoLimits, sluice.RuleDuplicateID,
		sluice.RuleNonPositiveLimit, sluice.RuleNoMembers,
	} {
		names = append(names, string(r))
	}
	for _, n := range names {
		if !strings.Contains(string(doc), "`"+n+"`") && !strings.Contains(string(doc), `"`+n+`"`) {
			t.Errorf("FORMAT.md does not describe `%s`", n)
		}
	}
}
