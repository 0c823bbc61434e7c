package server

import (
	"context"
	"log/slog"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/driver"
	"github.com/sluicehq/sluice/internal/app/outage"
)

// outageObserver is a limiter's failureObserver that also counts its
// store failures in the server's outage log, which writes a few lines an
// outage rather than one a decision, and logs a conflict of configuration
// versions (which the limiter tells once).
type outageObserver struct {
	failureObserver
	outage *outage.Log
	log    *slog.Logger
}

func (l outageObserver) Observe(e sluice.Event) {
	l.failureObserver.Observe(e)
	switch e.Kind {
	case sluice.EventStoreFailure:
		l.outage.Failure("limiter "+l.limiter, e.Err)
	case sluice.EventVersionConflict:
		l.log.Warn(e.Err.Error(), "limiter", l.limiter)
	}
}

// answered is the server's store as its limiters, Envoy's counters and
// the RLQS fleets see it: each call that succeeds tells the outage log
// that the store answers.
type answered struct {
	driver.Store
	outage *outage.Log
}

func (s answered) Update(ctx context.Context, key string, fn driver.UpdateFunc) error {
	err := s.Store.Update(ctx, key, fn)
	if err == nil {
		s.outage.Success()
	}
	return err
}

// answeredDeleter is answered over a store that can delete.
type answeredDeleter struct{ answered }

func (s answeredDeleter) Delete(ctx context.Context, key string) error {
	err := s.Store.(driver.Deleter).Delete(ctx, key)
	if err == nil {
		s.outage.Success()
	}
	return err
}

// answeredParts is answered over a store of partitions, which the
// limiters' per-partition circuit breakers ask for, and
// answeredPartsDeleter over one that can delete too.
type (
	answeredParts        struct{ answered }
	answeredPartsDeleter struct{ answeredDeleter }
)

func (s answeredParts) Partition(key string) string {
	return s.Store.(driver.Partitioner).Partition(key)
}

func (s answeredPartsDeleter) Partition(key string) string {
	return s.Store.(driver.Partitioner).Partition(key)
}

// watchAnswers returns st as answered, a driver.Deleter and a
// driver.Partitioner when st is. A store without partitions gets no
// Partition method, which would cost each decision the key's copy with
// its limiter's prefix (limiterStore.Partition) to learn "".
func watchAnswers(st driver.Store, o *outage.Log) driver.Store {
	a := answered{st, o}
	_, del := st.(driver.Deleter)
	_, parts := st.(driver.Partitioner)
	switch {
	case del && parts:
		return answeredPartsDeleter{answeredDeleter{a}}
	case del:
		return answeredDeleter{a}
	case parts:
		return answeredParts{a}
	}
	return a
}

// storeFailures say what each kind of store failure (outage.Kind) is, in
// an answer: the outage log has the details.
var storeFailures = map[string]string{
	"timeout":      "no answer within the store timeout",
	"unavailable":  "the store is unavailable",
	"circuit_open": "the circuit breaker keeps calls from the store",
	"answer_lost":  "the store's answer was lost",
	"contention":   "contention on the key",
	"other":        "an error of the store",
}

// storeFailure says what kind of store failure err is.
func storeFailure(err error) string { return storeFailures[outage.Kind(err)] }
