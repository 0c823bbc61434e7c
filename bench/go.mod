module github.com/sluicehq/sluice/bench

go 1.26.0

require (
	github.com/juju/ratelimit v1.0.2
	github.com/sluicehq/sluice v0.0.0
	github.com/throttled/throttled/v2 v2.15.0
	golang.org/x/time v0.16.0
)

require (
	github.com/hashicorp/golang-lru v0.5.4 // indirect
	github.com/kr/text v0.2.0 // indirect
)

replace github.com/sluicehq/sluice => ../
