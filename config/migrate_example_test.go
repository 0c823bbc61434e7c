package config_test

import (
	"fmt"
	"log"

	"github.com/sluicehq/sluice/config"
)

// A Symfony rate limiter file, loaded as it is.
func ExampleLoadSymfony() {
	f, err := config.LoadSymfony([]byte(`
framework:
    rate_limiter:
        anonymous_api:
            policy: 'fixed_window'
            limit: 100
            interval: '60 minutes'
            cache_pool: 'cache.rate_limiter'
        authenticated_api:
            policy: 'token_bucket'
            limit: 5000
            rate: { interval: '15 minutes', amount: 500 }
`))
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range f.Order {
		fmt.Println(name, f.Limiters[name].Policy)
	}
	fmt.Println(f.Notes[0].Path)
	// Output:
	// anonymous_api fixed_window(limit=100, interval=1h0m0s)
	// authenticated_api token_bucket(limit=5000, rate=500 per 15m0s)
	// framework.rate_limiter.anonymous_api.cache_pool
}

// Resilience4j's instances in a Spring Boot application.yml, with a shared
// config.
func ExampleLoadResilience4j() {
	r, err := config.LoadResilience4j([]byte(`
resilience4j:
  ratelimiter:
    configs:
      default: {limitForPeriod: 10, limitRefreshPeriod: 1s, timeoutDuration: 0}
    instances:
      backendA: {baseConfig: default}
      backendB: {limit-for-period: 6, limit-refresh-period: 500ms, timeout-duration: PT3S}
`))
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range r.RateLimiterOrder {
		c := r.RateLimiters[name].Config
		fmt.Println(name, c.LimitForPeriod, c.LimitRefreshPeriod, c.Timeout)
	}
	// Output:
	// backendA 10 1s 0s
	// backendB 6 500ms 3s
}
