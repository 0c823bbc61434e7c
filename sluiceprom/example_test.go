package sluiceprom_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluiceprom"
)

// A limiter's decisions as sluice serve's metrics, on a registry of the
// program's own.
func Example() {
	reg := prometheus.NewRegistry()
	metrics := sluiceprom.New()
	reg.MustRegister(metrics)

	l, err := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute), sluice.WithObserver(metrics.Observer("api")))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		if _, err := l.Allow(context.Background(), "alice"); err != nil {
			log.Fatal(err)
		}
	}
	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sluice_decisions_total Decisions by limiter and outcome (allowed, rejected, error; and in sluice serve invalid: the caller's mistake, answered 400).
# TYPE sluice_decisions_total counter
sluice_decisions_total{limiter="api",outcome="allowed"} 2
sluice_decisions_total{limiter="api",outcome="error"} 0
sluice_decisions_total{limiter="api",outcome="rejected"} 1
`), sluiceprom.Decisions)
	fmt.Println(err)
	// Output: <nil>
}
