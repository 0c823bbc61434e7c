package conformance_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
)

// writeFiles writes files (name to content) into a new directory and
// returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// run runs the vector files at paths against the local target.
func run(t *testing.T, paths ...string) *conformance.Report {
	t.Helper()
	r, err := conformance.Run(t.Context(), conformance.Local{}, paths...)
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	return r
}

// doc wraps cases (JSON objects) into a vector document.
func doc(cases ...string) string {
	return `{"suite": "test", "cases": [` + strings.Join(cases, ",") + `]}`
}

// tenPerSecond is a full bucket of capacity 10 refilling 10 per second.
const tenPerSecond = `{"limits": [{"capacity": 10, "refill": {"kind": "greedy", "tokens": 10, "period": "1s"}}]}`

func bucketCase(name, steps string) string {
	return `{"name": "` + name + `", "bucket": ` + tenPerSecond + `, "steps": [` + steps + `]}`
}

// caseReport returns the report of the only case of the only file in r.
func caseReport(t *testing.T, r *conformance.Report) conformance.CaseReport {
	t.Helper()
	if len(r.Files) != 1 || len(r.Files[0].Cases) != 1 {
		t.Fatalf("report has %d files (%+v), want 1 with 1 case", len(r.Files), r.Files)
	}
	return r.Files[0].Cases[0]
}

func TestRunReportsWrongExpectation(t *testing.T) {
	dir := writeFiles(t, map[string]string{"v.json": doc(
		bucketCase("right", `{"op": "try_consume", "tokens": 4, "want": true}, {"op": "available", "want": 6}`),
		bucketCase("wrong", `{"op": "try_consume", "tokens": 4, "want": true}, {"advance": "100ms"}, {"op": "available", "want": 6}`),
	)})
	r := run(t, dir)
	if p, f, s := r.Counts(); p != 1 || f != 1 || s != 0 {
		t.Errorf("Counts() = %d, %d, %d, want 1, 1, 0", p, f, s)
	}
	if got, want := r.Summary(), "1 passed, 1 failed, 0 skipped"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
	fs := r.Failures()
	if len(fs) != 1 {
		t.Fatalf("Failures() = %v, want 1 failure", fs)
	}
	want := conformance.Failure{File: filepath.Join(dir, "v.json"), Case: "wrong", Step: 2, Op: "available", Want: "6", Got: "7"}
	if *fs[0] != want {
		t.Errorf("failure = %+v, want %+v", *fs[0], want)
	}
	if got, want := fs[0].Error(), `v.json: case "wrong": step 2 (available): want 6, got 7`; !strings.HasSuffix(got, want) {
		t.Errorf("Error() = %q, want it to end in %q", got, want)
	}
}

func TestRunComparesOnlyWantedFields(t *testing.T) {
	tests := []struct {
		name, step, want, got string // want and got "" when the step passes
	}{
		{"fields present pass", `{"op": "try_consume_and_return_remaining", "tokens": 11, "want": {"consumed": false, "remaining": 10}}`, "", ""},
		{"a wrong field fails", `{"op": "try_consume_and_return_remaining", "tokens": 4, "want": {"remaining": 7}}`,
			`{"remaining": 7}`,
			`{"consumed": true, "remaining": 6, "nanos_to_wait_for_refill": 0, "nanos_to_wait_for_reset": 400000000}`},
		{"int64 max", `{"op": "estimate_ability_to_consume", "tokens": 11, "want": {"nanos_to_wait_for_refill": 9223372036854775807}}`, "", ""},
		{"int64 max minus 1 is not int64 max", `{"op": "estimate_ability_to_consume", "tokens": 11, "want": {"nanos_to_wait_for_refill": 9223372036854775806}}`,
			`{"nanos_to_wait_for_refill": 9223372036854775806}`,
			`{"can_be_consumed": false, "remaining": 10, "nanos_to_wait_for_refill": 9223372036854775807}`},
		{"a step without want is not compared", `{"op": "try_consume", "tokens": 11}`, "", ""},
		{"want_error matched", `{"op": "try_consume", "tokens": 0, "want_error": "invalid_argument"}`, "", ""},
		{"want_error without an error", `{"op": "try_consume", "tokens": 1, "want_error": "invalid_argument"}`,
			"error invalid_argument", "no error, true"},
		{"an unexpected error", `{"op": "add_tokens", "tokens": 0}`, "no error",
			"error invalid_argument (sluice: Bucket.AddTokens: tokens must be positive, got 0)"},
		{"blocking", `{"op": "blocking_try_consume", "tokens": 12, "max_wait": "1s", "want": {"consumed": true, "slept": 100000000}}`,
			`{"consumed": true, "slept": 100000000}`, `{"consumed": true, "slept": 200000000}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := caseReport(t, run(t, writeFiles(t, map[string]string{"v.json": doc(bucketCase("c", tt.step))})))
			if tt.want == "" {
				if c.Status != conformance.Passed {
					t.Errorf("status = %v (%v), want passed", c.Status, c.Failure)
				}
				return
			}
			if c.Status != conformance.Failed {
				t.Fatalf("status = %v, want failed", c.Status)
			}
			if c.Failure.Step != 0 || c.Failure.Want != tt.want || c.Failure.Got != tt.got {
				t.Errorf("failure = step %d, want %s, got %s; want step 0, want %s, got %s",
					c.Failure.Step, c.Failure.Want, c.Failure.Got, tt.want, tt.got)
			}
		})
	}
}

func TestRunMalformedCases(t *testing.T) {
	limits := `"limits": [{"capacity": 10, "refill": {"kind": "greedy", "tokens": 10, "period": "1s"}}]`
	tests := []struct {
		name    string
		kase    string
		step    int
		wantMsg string
	}{
		{"bucket and limiter", `{"name": "c", "bucket": {` + limits + `}, "limiter": {"policy": "no_limit"}, "steps": []}`, -1, "not both"},
		{"neither bucket nor limiter", `{"name": "c", "steps": []}`, -1, "neither a bucket nor a limiter"},
		{"no name", `{"bucket": {` + limits + `}, "steps": []}`, -1, "no name"},
		{"bad duration", `{"name": "c", "bucket": {"limits": [{"capacity": 10, "refill": {"kind": "greedy", "tokens": 10, "period": "1x"}}]}}`, -1, `bad duration "1x"`},
		{"integer as float", `{"name": "c", "bucket": {"limits": [{"capacity": 10.5, "refill": {"kind": "greedy", "tokens": 10, "period": "1s"}}]}}`, -1, "limits[0]: 10.5 is not an integer"},
		{"unknown refill kind", `{"name": "c", "bucket": {"limits": [{"capacity": 10, "refill": {"kind": "smooth", "tokens": 10, "period": "1s"}}]}}`, -1, `refill.kind "smooth"`},
		{"missing capacity", `{"name": "c", "bucket": {"limits": [{"refill": {"kind": "greedy", "tokens": 10, "period": "1s"}}]}}`, -1, "capacity is missing"},
		{"missing limits", `{"name": "c", "bucket": {}}`, -1, "limits is missing"},
		{"bad precision", `{"name": "c", "bucket": {"precision": "micros", ` + limits + `}}`, -1, `precision "micros"`},
		{"want_config_error with steps", `{"name": "c", "bucket": {` + limits + `}, "want_config_error": true, "steps": [{"advance": 1}]}`, -1, "has no steps"},
		{"want_config_error of a bad type", `{"name": "c", "bucket": {` + limits + `}, "want_config_error": 1}`, -1, "want true or a rule name"},
		{"unknown op", bucketCase("c", `{"advance": 1}, {"op": "frobnicate"}`), 1, `unknown op "frobnicate"`},
		{"missing tokens", bucketCase("c", `{"op": "try_consume", "want": true}`), 0, "tokens is missing"},
		{"bad max_wait", bucketCase("c", `{"op": "blocking_try_consume", "tokens": 1, "max_wait": "soon"}`), 0, `bad duration "soon"`},
		{"want of the wrong type", bucketCase("c", `{"op": "try_consume", "tokens": 1, "want": 1}`), 0, "want: 1 is not true or false"},
		{"unknown want field", bucketCase("c", `{"op": "estimate_ability_to_consume", "tokens": 1, "want": {"remainng": 1}}`), 0, `"remainng" is not one of the fields`},
		{"want for an op without value", bucketCase("c", `{"op": "reset", "want": 1}`), 0, "returns nothing"},
		{"want and want_error", bucketCase("c", `{"op": "try_consume", "tokens": 0, "want": false, "want_error": "invalid_argument"}`), 0, "not both"},
		{"unknown error code", bucketCase("c", `{"op": "try_consume", "tokens": 0, "want_error": "oops"}`), 0, `want_error "oops"`},
		{"advance and op", bucketCase("c", `{"advance": 1, "op": "reset"}`), 0, "exactly one of advance, set_clock and op"},
		{"empty step", bucketCase("c", `{}`), 0, "exactly one of advance, set_clock and op"},
		{"unknown strategy", bucketCase("c", `{"op": "replace_configuration", "bucket": {`+limits+`}, "strategy": "merge"}`), 0, `strategy "merge"`},
		{"replacement bucket malformed", bucketCase("c", `{"op": "replace_configuration", "bucket": {}, "strategy": "as_is"}`), 0, "bucket: limits is missing"},
		{"step not an object", bucketCase("c", `[1]`), 0, "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			good := bucketCase("good", `{"op": "available", "want": 10}`)
			r := run(t, writeFiles(t, map[string]string{"v.json": doc(good, tt.kase, good[:len(good)-1]+`, "name": "good too"}`)}))
			if p, f, s := r.Counts(); p != 2 || f != 1 || s != 0 {
				t.Fatalf("Counts() = %d, %d, %d, want 2, 1, 0 (%v)", p, f, s, r.Failures())
			}
			f := r.Files[0].Cases[1].Failure
			if f.Step != tt.step || !strings.Contains(f.Msg, tt.wantMsg) {
				t.Errorf("failure = %v, want step %d and a message with %q", f, tt.step, tt.wantMsg)
			}
		})
	}
}

func TestRunDuplicateNames(t *testing.T) {
	c := bucketCase("same", `{"op": "available", "want": 10}`)
	r := run(t, writeFiles(t, map[string]string{"v.json": doc(c, c)}))
	if p, f, _ := r.Counts(); p != 1 || f != 1 {
		t.Fatalf("Counts() = %d passed, %d failed, want 1, 1", p, f)
	}
	if msg := r.Files[0].Cases[1].Failure.Msg; !strings.Contains(msg, "same name") {
		t.Errorf("failure message = %q, want one about the same name", msg)
	}
}

func TestRunBadFiles(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.json":     doc(bucketCase("ok", `{"op": "available", "want": 10}`)),
		"b.json":     "{\n  \"cases\": [\n    {\"name\": \"x\",}\n  ]\n}",
		"c.json":     `{"suite": "empty", "cases": []}`,
		"d.json":     doc(bucketCase("ok", `{"op": "available", "want": 10}`)),
		"notes.txt":  "not a vector",
		"e.json.bak": "{",
	})
	empty := t.TempDir()
	r := run(t, dir, filepath.Join(dir, "missing.json"), empty)
	if p, f, s := r.Counts(); p != 2 || f != 4 || s != 0 {
		t.Errorf("Counts() = %d, %d, %d, want 2, 4, 0", p, f, s)
	}
	var got []string
	for _, f := range r.Failures() {
		got = append(got, f.Error())
	}
	for i, want := range []string{"b.json: invalid JSON at line 3, column 18", "c.json: the file has no cases", "missing.json: stat", "no *.json files"} {
		if i >= len(got) || !strings.Contains(got[i], want) {
			t.Errorf("failures = %q, want #%d to contain %q", got, i, want)
		}
	}
}

func TestRunNoPaths(t *testing.T) {
	if _, err := conformance.Run(t.Context(), conformance.Local{}); err == nil {
		t.Error("Run() with no paths: no error")
	}
}

// limiterCase is a case named name of the limiter spec with steps.
func limiterCase(name, limiter, steps string) string {
	return `{"name": "` + name + `", "limiter": ` + limiter + `, "steps": [` + steps + `]}`
}

// threePer10s is a fixed window of 3 per 10 seconds.
const threePer10s = `{"policy": "fixed_window", "limit": 3, "interval": "10s"}`

func TestRunLimiterReportsWrongExpectation(t *testing.T) {
	dir := writeFiles(t, map[string]string{"v.json": doc(
		limiterCase("right", threePer10s, `{"op": "consume", "tokens": 2, "want": {"accepted": true, "remaining": 1}}`),
		limiterCase("wrong", threePer10s, `{"op": "consume", "tokens": 3}, {"advance": "4s"}, {"op": "consume", "want": {"accepted": false, "retry_after": 5000000000}}`),
	)})
	r := run(t, dir)
	if got, want := r.Summary(), "1 passed, 1 failed, 0 skipped"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
	fs := r.Failures()
	if len(fs) != 1 {
		t.Fatalf("Failures() = %v, want 1 failure", fs)
	}
	want := conformance.Failure{File: filepath.Join(dir, "v.json"), Case: "wrong", Step: 2, Op: "consume",
		Want: `{"accepted": false, "retry_after": 5000000000}`,
		Got:  `{"accepted": false, "remaining": 0, "retry_after": 6000000000, "limit": 3, "reset_after": 6000000000}`}
	if *fs[0] != want {
		t.Errorf("failure = %+v, want %+v", *fs[0], want)
	}
	if got, want := fs[0].Error(), `v.json: case "wrong": step 2 (consume): want {"accepted": false, "retry_after": 5000000000}, got {"accepted": false, "remaining": 0, "retry_after": 6000000000, "limit": 3, "reset_after": 6000000000}`; !strings.HasSuffix(got, want) {
		t.Errorf("Error() = %q, want it to end in %q", got, want)
	}
}

func TestRunLimiterSteps(t *testing.T) {
	const (
		slidingWindow = `{"policy": "sliding_window", "limit": 3, "interval": "10s"}`
		r4j           = `{"policy": "resilience4j", "limit_for_period": 2, "limit_refresh_period": "1s", "timeout": "1s"}`
		timeLimiter   = `{"policy": "time_limiter", "timeout": "1s", "cancel_running_future": true}`
		bursty        = `{"policy": "smooth_bursty", "permits_per_second": 4}`
	)
	tests := []struct {
		name, limiter, steps string
		step                 int
		want, got, msg       string // all "" when the case passes
	}{
		{"consume passes", threePer10s, `{"op": "consume", "want": {"accepted": true, "remaining": 2, "retry_after": 0, "limit": 3}}`, 0, "", "", ""},
		{"consume takes 1 by default", threePer10s, `{"op": "consume"}, {"op": "consume", "tokens": 2, "want": {"remaining": 0}}`, 0, "", "", ""},
		{"reserve", threePer10s, `{"op": "consume", "tokens": 3}, {"op": "reserve", "tokens": 1, "want": {"wait": 10000000000}}`, 0, "", "", ""},
		{"reserve over max_wait", threePer10s, `{"op": "consume", "tokens": 3}, {"op": "reserve", "tokens": 1, "max_wait": "9s", "want_error": "max_wait_exceeded"}`, 0, "", "", ""},
		{"reserve not supported", slidingWindow, `{"op": "reserve", "tokens": 1, "want_error": "reserve_not_supported"}`, 0, "", "", ""},
		{"reserve not supported unexpected", slidingWindow, `{"op": "reserve", "tokens": 1, "want": {"wait": 0}}`, 0,
			`{"wait": 0}`, "error reserve_not_supported (sluice: Limiter.ReserveN: the policy cannot reserve: unsupported operation)", ""},
		{"invalid argument", threePer10s, `{"op": "consume", "tokens": 4, "want_error": "invalid_argument"}`, 0, "", "", ""},
		{"invalid_interval is a deliberate difference", `{"policy": "sliding_window", "limit": 3, "interval": "500ms"}`,
			`{"advance": "1s"}, {"op": "consume", "want_error": "invalid_interval"}`, 1,
			"error invalid_interval", `no error, {"accepted": true, "remaining": 2, "retry_after": 0, "limit": 3, "reset_after": 1000000000}`, "does not reproduce"},
		{"reset", threePer10s, `{"op": "consume", "tokens": 3}, {"op": "reset"}, {"op": "consume", "tokens": 3, "want": {"accepted": true}}`, 0, "", "", ""},
		{"resilience4j", r4j, `{"op": "reserve", "permits": 3, "want": {"wait": 1000000000}}, {"op": "available", "want": -1}, {"op": "nanos_to_wait", "want": 1000000000},
			{"op": "acquire", "want": {"acquired": true, "waited": 1000000000}}, {"op": "available", "want": 0}, {"op": "drain"}, {"op": "change_timeout", "timeout": 0},
			{"op": "change_limit_for_period", "limit": 5}, {"op": "acquire", "want": {"acquired": false, "waited": 0}}`, 0, "", "", ""},
		{"resilience4j wrong wait", r4j, `{"op": "acquire", "permits": 2}, {"op": "acquire", "want": {"acquired": true, "waited": 0}}`, 1,
			`{"acquired": true, "waited": 0}`, `{"acquired": true, "waited": 1000000000}`, ""},
		{"time limiter", timeLimiter, `{"op": "call", "task": "1s", "outcome": "error", "want": {"result": "error", "waited": 1000000000, "cancelled": false}}`, 0, "", "", ""},
		{"time limiter wrong result", timeLimiter, `{"op": "call", "task": "1001ms", "outcome": "value", "want": {"result": "success"}}`, 0,
			`{"result": "success"}`, `{"result": "timeout", "waited": 1000000000, "cancelled": true}`, ""},
		{"smooth", bursty, `{"op": "acquire", "permits": 2, "want": {"waited": 0}}, {"op": "try_acquire", "permits": 1, "timeout": "500ms", "want": true}, {"op": "acquire", "want": {"waited": 250000000}}`, 0, "", "", ""},
		{"smooth wrong wait", bursty, `{"op": "acquire"}, {"op": "acquire", "want": {"waited": 0}}`, 1, `{"waited": 0}`, `{"waited": 250000000}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := caseReport(t, run(t, writeFiles(t, map[string]string{"v.json": doc(limiterCase("c", tt.limiter, tt.steps))})))
			if tt.want == "" {
				if c.Status != conformance.Passed {
					t.Errorf("status = %v (%v), want passed", c.Status, c.Failure)
				}
				return
			}
			if c.Status != conformance.Failed {
				t.Fatalf("status = %v, want failed", c.Status)
			}
			f := c.Failure
			if f.Step != tt.step || f.Want != tt.want || f.Got != tt.got || !strings.Contains(f.Msg, tt.msg) {
				t.Errorf("failure = step %d, want %s, got %s (%q); want step %d, want %s, got %s (%q)",
					f.Step, f.Want, f.Got, f.Msg, tt.step, tt.want, tt.got, tt.msg)
			}
		})
	}
}

// TestRunTimeLimiterDeterministic runs time-limiter calls many times: their
// outcome must not depend on how the goroutines are scheduled.
func TestRunTimeLimiterDeterministic(t *testing.T) {
	steps := `{"op": "call", "task": "999999999ns", "outcome": "value", "want": {"result": "success", "waited": 999999999, "cancelled": false}},
		{"op": "call", "task": "1000000001ns", "outcome": "value", "want": {"result": "timeout", "waited": 1000000000, "cancelled": true}},
		{"op": "call", "task": "1s", "outcome": "error", "want": {"result": "error", "waited": 1000000000, "cancelled": false}}`
	keep := strings.ReplaceAll(steps, `"cancelled": true`, `"cancelled": false`)
	var cases []string
	for i := range 50 {
		cases = append(cases,
			limiterCase(fmt.Sprintf("cancel %d", i), `{"policy": "time_limiter", "timeout": "1s", "cancel_running_future": true}`, steps),
			limiterCase(fmt.Sprintf("keep %d", i), `{"policy": "time_limiter", "timeout": "1s", "cancel_running_future": false}`, keep))
	}
	r := run(t, writeFiles(t, map[string]string{"v.json": doc(cases...)}))
	if got, want := r.Summary(), "100 passed, 0 failed, 0 skipped"; got != want {
		t.Errorf("Summary() = %q, want %q; failures %v", got, want, r.Failures())
	}
}

func TestRunMalformedLimiters(t *testing.T) {
	tests := []struct {
		name, kase string
		step       int
		wantMsg    string
	}{
		{"unknown policy", limiterCase("c", `{"policy": "token_buket", "limit": 1}`, ``), -1, `limiter.policy: unknown policy "token_buket"; known policies: `},
		{"no policy", limiterCase("c", `{"limit": 1}`, ``), -1, `limiter: missing required key "policy"`},
		{"not an object", limiterCase("c", `[1]`, ``), -1, "limiter: must be a mapping, got a list"},
		{"missing limit", limiterCase("c", `{"policy": "fixed_window", "interval": "1s"}`, ``), -1, `limiter: missing required key "limit"`},
		{"missing rate amount", limiterCase("c", `{"policy": "token_bucket", "limit": 1, "rate": {"interval": "1s"}}`, ``), -1, `limiter.rate: missing required key "amount"`},
		{"a field of another policy", limiterCase("c", `{"policy": "sliding_log", "limit": 1, "interval": "1s", "max_queue": 1}`, ``), -1, `limiter.max_queue: key "max_queue" is not valid for policy sliding_log, which takes limit, interval`},
		{"limit as float", limiterCase("c", `{"policy": "fixed_window", "limit": 1.5, "interval": "1s"}`, ``), -1, "limiter.limit: must be an integer, got float 1.5"},
		{"compat member", limiterCase("c", `{"policy": "compound", "limiters": [{"policy": "resilience4j"}]}`, ``), -1, "limiter.limiters[0]: policy resilience4j cannot be a member of a compound"},
		{"bad member", limiterCase("c", `{"policy": "compound", "limiters": [{"policy": "no_limit"}, {"policy": "gcra", "limit": 1}]}`, ``), -1, `limiter.limiters[1]: missing required key "rate"`},
		{"smooth without rate", limiterCase("c", `{"policy": "smooth_bursty"}`, ``), -1, `limiter: missing required key "permits_per_second"`},
		{"smooth rate as string", limiterCase("c", `{"policy": "smooth_bursty", "permits_per_second": "5"}`, ``), -1, `limiter.permits_per_second: must be a finite number, got string "5"`},
		{"duration without unit as a string", limiterCase("c", `{"policy": "fixed_window", "limit": 1, "interval": "60 minutes"}`, ``), -1, `limiter.interval: must be a Go duration string or an integer of nanoseconds, got string "60 minutes"`},
		{"integer beyond int64", limiterCase("c", `{"policy": "fixed_window", "limit": 9223372036854775808, "interval": "1s"}`, ``), -1, "limiter.limit: overflows int64"},
		{"member by name", limiterCase("c", `{"policy": "compound", "limiters": ["a"]}`, ``), -1, `limiter.limiters[0]: unknown limiter "a"; a vector's compound members are written in place`},
		{"duplicate field", limiterCase("c", `{"policy": "fixed_window", "limit": 1, "limit": 2, "interval": "1s"}`, ``), -1, `limiter.limit: duplicate key "limit"`},
		{"misplaced first_refill", limiterCase("c", `{"policy": "bucket", "limits": [{"capacity": 1, "refill": {"greedy": 1, "per": "1s", "first_refill": 0}}]}`, ``), -1, `key "first_refill" is only valid with intervally_aligned, not greedy`},
		{"bucket op on a limiter", limiterCase("c", threePer10s, `{"op": "try_consume", "tokens": 1}`), 0, `unknown op "try_consume" for a limiter`},
		{"limiter op on a bucket", bucketCase("c", `{"op": "consume"}`), 0, `unknown op "consume" for a bucket`},
		{"compat op on a limiter", limiterCase("c", threePer10s, `{"op": "drain"}`), 0, `unknown op "drain" for a limiter`},
		{"reserve without tokens", limiterCase("c", threePer10s, `{"op": "reserve"}`), 0, "tokens is missing"},
		{"resilience4j reserve without permits", limiterCase("c", `{"policy": "resilience4j"}`, `{"op": "reserve"}`), 0, "permits is missing"},
		{"change_limit_for_period without limit", limiterCase("c", `{"policy": "resilience4j"}`, `{"op": "change_limit_for_period"}`), 0, "limit is missing"},
		{"try_acquire without timeout", limiterCase("c", `{"policy": "smooth_bursty", "permits_per_second": 1}`, `{"op": "try_acquire", "permits": 1}`), 0, "timeout is missing"},
		{"call without outcome", limiterCase("c", `{"policy": "time_limiter"}`, `{"op": "call", "task": "1s"}`), 0, "outcome is missing"},
		{"call with a bad outcome", limiterCase("c", `{"policy": "time_limiter"}`, `{"op": "call", "task": "1s", "outcome": "panic"}`), 0, `outcome "panic" is neither value nor error`},
		{"call with a negative task", limiterCase("c", `{"policy": "time_limiter"}`, `{"op": "call", "task": "-1s", "outcome": "value"}`), 0, "task -1s is negative"},
		{"call with a bad result", limiterCase("c", `{"policy": "time_limiter"}`, `{"op": "call", "task": "1s", "outcome": "value", "want": {"result": "ok"}}`), 0, `want: result: "ok" is none of success, timeout, error`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			good := limiterCase("good", threePer10s, `{"op": "consume", "want": {"accepted": true}}`)
			r := run(t, writeFiles(t, map[string]string{"v.json": doc(good, tt.kase)}))
			if p, f, s := r.Counts(); p != 1 || f != 1 || s != 0 {
				t.Fatalf("Counts() = %d, %d, %d, want 1, 1, 0 (%v)", p, f, s, r.Failures())
			}
			f := r.Files[0].Cases[1].Failure
			if f.Step != tt.step || !strings.Contains(f.Msg, tt.wantMsg) {
				t.Errorf("failure = %v, want step %d and a message with %q", f, tt.step, tt.wantMsg)
			}
		})
	}
}

func TestRunLimiterConfigErrors(t *testing.T) {
	tests := []struct {
		name, limiter, want string
		pass                bool
		got, msg            string
	}{
		{"rule matches", `{"policy": "fixed_window", "limit": 0, "interval": "1s"}`, `"non_positive_limit"`, true, "", ""},
		{"any rule", `{"policy": "compound", "limiters": []}`, "true", true, "", ""},
		{"compat rule", `{"policy": "smooth_warming_up", "permits_per_second": 1, "warmup_period": "-1s"}`, `"negative_warmup"`, true, "", ""},
		{"other rule", `{"policy": "resilience4j", "limit_for_period": 0}`, `"non_positive_limit"`, false,
			"config error non_positive_limit_for_period (sluice: config: LimitForPeriod must be positive, got 0)", ""},
		{"no error", threePer10s, "true", false, "no error", ""},
		{"invalid_interval", `{"policy": "sliding_window", "limit": 1, "interval": "1ms"}`, `"invalid_interval"`, false, "no error", "does not reproduce"},
		// A description config files refuse is a configuration error, of
		// no rule: the one decoder says so for both.
		{"incomplete options", `{"policy": "token_bucket", "limit": 10}`, "true", true, "", ""},
		{"incomplete options, a rule", `{"policy": "token_bucket", "limit": 10}`, `"non_positive_limit"`, false,
			`config error of no rule (limiter: missing required key "rate")`, ""},
		{"a member incomplete", `{"policy": "compound", "limiters": [{"policy": "gcra", "limit": 1}]}`, "true", true, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kase := `{"name": "c", "limiter": ` + tt.limiter + `, "want_config_error": ` + tt.want + `}`
			c := caseReport(t, run(t, writeFiles(t, map[string]string{"v.json": doc(kase)})))
			if tt.pass {
				if c.Status != conformance.Passed {
					t.Errorf("status = %v (%v), want passed", c.Status, c.Failure)
				}
				return
			}
			f := c.Failure
			if c.Status != conformance.Failed || f.Step != -1 || f.Got != tt.got || !strings.Contains(f.Msg, "building the limiter") || !strings.Contains(f.Msg, tt.msg) {
				t.Errorf("case = %v %v, want failed at step -1 building the limiter with got %q and a message with %q", c.Status, f, tt.got, tt.msg)
			}
		})
	}
}

// bucketsOnly is a target of buckets alone: neither a LimiterTarget nor a
// CompatTarget.
type bucketsOnly struct{}

func (bucketsOnly) Name() string { return "buckets-only" }

func (bucketsOnly) NewBucket(ctx context.Context, cfg sluice.BucketConfig, c sluice.Clock) (conformance.Bucket, error) {
	return conformance.Local{}.NewBucket(ctx, cfg, c)
}

// keyedOnly is a LimiterTarget that is not a CompatTarget, as a store's
// target will be.
type keyedOnly struct{ bucketsOnly }

func (keyedOnly) Name() string { return "keyed-only" }

func (keyedOnly) NewLimiter(ctx context.Context, p sluice.Policy, c sluice.Clock) (conformance.Limiter, error) {
	return conformance.Local{}.NewLimiter(ctx, p, c)
}

func TestRunSkipsLimiterCasesOfTargetsWithout(t *testing.T) {
	dir := writeFiles(t, map[string]string{"v.json": doc(
		bucketCase("bucket", `{"op": "available", "want": 10}`),
		limiterCase("window", threePer10s, `{"op": "consume", "want": {"accepted": true}}`),
		`{"name": "bad window", "limiter": {"policy": "fixed_window", "limit": 0, "interval": "1s"}, "want_config_error": "non_positive_limit"}`,
		limiterCase("resilience4j", `{"policy": "resilience4j"}`, `{"op": "acquire", "want": {"acquired": true}}`),
		limiterCase("time limiter", `{"policy": "time_limiter"}`, `{"op": "call", "task": 0, "outcome": "value", "want": {"result": "success"}}`),
		limiterCase("smooth", `{"policy": "smooth_warming_up", "permits_per_second": 1, "warmup_period": "1s"}`, `{"op": "acquire", "want": {"waited": 0}}`),
		limiterCase("malformed", `{"policy": "time_limiter"}`, `{"op": "call"}`),
	)})
	skipKeyed := "target buckets-only has no keyed limiters"
	tests := []struct {
		target conformance.Target
		want   []string // per case: "passed", "failed" or the skip reason
	}{
		{conformance.Local{}, []string{"passed", "passed", "passed", "passed", "passed", "passed", "failed"}},
		{bucketsOnly{}, []string{"passed", skipKeyed, skipKeyed,
			"target buckets-only does not run the compatibility policies: resilience4j is local-only",
			"target buckets-only does not run the compatibility policies: time_limiter is local-only",
			"target buckets-only does not run the compatibility policies: smooth_warming_up is local-only",
			"failed"}},
		{keyedOnly{}, []string{"passed", "passed", "passed",
			"target keyed-only does not run the compatibility policies: resilience4j is local-only",
			"target keyed-only does not run the compatibility policies: time_limiter is local-only",
			"target keyed-only does not run the compatibility policies: smooth_warming_up is local-only",
			"failed"}},
	}
	for _, tt := range tests {
		t.Run(tt.target.Name(), func(t *testing.T) {
			r, err := conformance.Run(t.Context(), tt.target, dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range r.Files[0].Cases {
				if c.Status == conformance.Skipped {
					got = append(got, c.Reason)
				} else {
					got = append(got, c.Status.String())
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("case outcomes = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRunConfigErrors(t *testing.T) {
	zero := `{"limits": [{"capacity": 0, "refill": {"kind": "greedy", "tokens": 1, "period": "1s"}}]}`
	tests := []struct {
		name, bucket, want string
		pass               bool
		got                string
	}{
		{"rule matches", zero, `"non_positive_capacity"`, true, ""},
		{"any rule", zero, "true", true, ""},
		{"other rule", zero, `"no_limits"`, false, "config error non_positive_capacity (sluice: bandwidth 0: capacity must be positive, got 0)"},
		{"no error", tenPerSecond, "true", false, "no error"},
		{"unexpected error", zero, "false", false, "error (sluice: bandwidth 0: capacity must be positive, got 0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kase := `{"name": "c", "bucket": ` + tt.bucket + `, "want_config_error": ` + tt.want + `}`
			c := caseReport(t, run(t, writeFiles(t, map[string]string{"v.json": doc(kase)})))
			if tt.pass {
				if c.Status != conformance.Passed {
					t.Errorf("status = %v (%v), want passed", c.Status, c.Failure)
				}
				return
			}
			if c.Status != conformance.Failed || c.Failure.Step != -1 || c.Failure.Got != tt.got {
				t.Errorf("case = %v %v, want failed at step -1 with got %q", c.Status, c.Failure, tt.got)
			}
		})
	}
}

// noBlocking is a target whose buckets do not implement BlockingBucket.
type noBlocking struct{ conformance.Local }

func (noBlocking) Name() string { return "no-blocking" }

func (t noBlocking) NewBucket(ctx context.Context, cfg sluice.BucketConfig, c sluice.Clock) (conformance.Bucket, error) {
	b, err := t.Local.NewBucket(ctx, cfg, c)
	return struct{ conformance.Bucket }{b}, err
}

func TestRunSkipsBlockingCasesOfTargetsWithout(t *testing.T) {
	dir := writeFiles(t, map[string]string{"v.json": doc(
		bucketCase("blocking", `{"op": "blocking_consume", "tokens": 1, "want": {"slept": 0}}`),
		bucketCase("plain", `{"op": "available", "want": 10}`),
	)})
	r, err := conformance.Run(t.Context(), noBlocking{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Summary(); got != "1 passed, 0 failed, 1 skipped" {
		t.Errorf("Summary() = %q, want 1 passed, 0 failed, 1 skipped", got)
	}
	if c := r.Files[0].Cases[0]; !strings.Contains(c.Reason, "no blocking operations") {
		t.Errorf("skip reason = %q, want one about blocking operations", c.Reason)
	}
}

// panicking is a target whose buckets panic on AvailableTokens.
type panicking struct{ conformance.Local }

type panickingBucket struct{ conformance.Bucket }

func (panickingBucket) AvailableTokens(context.Context) (int64, error) { panic("boom") }

func (t panicking) NewBucket(ctx context.Context, cfg sluice.BucketConfig, c sluice.Clock) (conformance.Bucket, error) {
	b, err := t.Local.NewBucket(ctx, cfg, c)
	return panickingBucket{b}, err
}

func TestRunRecoversPanics(t *testing.T) {
	dir := writeFiles(t, map[string]string{"v.json": doc(
		bucketCase("panics", `{"advance": 1}, {"op": "available", "want": 10}`),
		bucketCase("runs", `{"op": "try_consume", "tokens": 1, "want": true}`),
	)})
	r, err := conformance.Run(t.Context(), panicking{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if p, f, _ := r.Counts(); p != 1 || f != 1 {
		t.Fatalf("Counts() = %d passed, %d failed, want 1, 1", p, f)
	}
	if f := r.Files[0].Cases[0].Failure; f.Step != 1 || f.Op != "available" || !strings.HasPrefix(f.Msg, "panic: boom") {
		t.Errorf("failure = %v, want a panic at step 1 (available)", f)
	}
}

func TestRunCancelled(t *testing.T) {
	dir := writeFiles(t, map[string]string{"v.json": doc(bucketCase("c", `{"op": "available", "want": 10}`))})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r, err := conformance.Run(ctx, conformance.Local{}, dir)
	if err != context.Canceled {
		t.Errorf("Run with a cancelled context = %v, want context.Canceled", err)
	}
	if r == nil || len(r.Files) != 1 || len(r.Files[0].Cases) != 0 {
		t.Errorf("report = %+v, want the file with no case run", r)
	}
}

func TestRunSetClockAndMillis(t *testing.T) {
	kase := `{"name": "c", "start": 1500000, "bucket": {"precision": "millis", "limits": [{"capacity": 1000, "refill": {"kind": "greedy", "tokens": 1000, "period": "1s"}, "initial": 0}]},
	  "steps": [{"op": "available", "want": 0}, {"set_clock": 2999999}, {"op": "available", "want": 1}, {"advance": 1}, {"op": "available", "want": 2}]}`
	c := caseReport(t, run(t, writeFiles(t, map[string]string{"v.json": doc(kase)})))
	if c.Status != conformance.Passed {
		t.Errorf("status = %v (%v), want passed", c.Status, c.Failure)
	}
}
