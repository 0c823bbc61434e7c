package server

import (
	"context"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// planOptions are the options a config file's limiter l adds to its
// sluice.Limiter: its version (version:) and its policies per key
// (overrides:).
func planOptions(l config.Limiter) []sluice.Option {
	opts := []sluice.Option{sluice.WithConfigVersion(l.Version)}
	if f := l.PolicyFunc(); f != nil {
		opts = append(opts, sluice.WithPolicyFor(f))
	}
	return opts
}

// planOf names everything l limits with: its policy and its overrides.
// Two limiters with the same planOf limit every key alike.
func planOf(l config.Limiter) string {
	var b strings.Builder
	b.WriteString(l.Policy.String())
	for _, o := range l.Overrides {
		kind := "key"
		if o.Prefix {
			kind = "prefix"
		}
		b.WriteString("; " + kind + " " + strconv.Quote(o.Key) + ": " + o.Policy.String())
	}
	return b.String()
}

// checkReload refuses a reload that changes a versioned limiter's
// policies but not its version: processes of the old and the new config
// would claim one version, and the stored keys would keep the old
// policies (sluice.WithConfigVersion). Raising the version, or leaving
// it at 0 (unversioned: the new config wins at once), is accepted.
func checkReload(old *snapshot, l config.Limiter) error {
	o, ok := old.limiter(l.Name)
	if !ok || l.Version == 0 || o.version != l.Version || o.plan == planOf(l) {
		return nil
	}
	return &config.Error{Path: "limiters." + l.Name, Line: l.Line, Column: l.Column,
		Msg: "its policies changed but its version stayed " + strconv.FormatUint(l.Version, 10) + ": raise version, so that every process migrates the keys to the new policies once"}
}

// policyOf is the policy of key: its override's, or the limiter's.
func (l *limiter) policyOf(key string) sluice.Policy {
	if l.resolve != nil {
		if p, _ := l.resolve(context.Background(), key); p != nil {
			return p
		}
		return l.policy
	}
	if l.overrides != nil {
		return l.overrides.PolicyFor(key)
	}
	return l.policy
}
