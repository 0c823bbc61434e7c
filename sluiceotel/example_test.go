package sluiceotel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluiceotel"
)

// A limiter's decisions as OpenTelemetry metrics, read here with a manual
// reader; a program gives its own provider's meter.
func Example() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	metrics, err := sluiceotel.New(provider.Meter("github.com/sluicehq/sluice"))
	if err != nil {
		log.Fatal(err)
	}
	l, err := sluice.NewLimiter(sluice.FixedWindow(2, time.Minute), sluice.WithObserver(metrics.Observer("api")))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		if _, err := l.Allow(ctx, "alice"); err != nil {
			log.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "sluice_tokens_consumed_total" {
			continue
		}
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			limiter, _ := p.Attributes.Value("limiter")
			fmt.Println(m.Name, limiter.AsString(), p.Value)
		}
	}
	// Output: sluice_tokens_consumed_total api 2
}
