package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/app/plans"
	"github.com/sluicehq/sluice/internal/metricnames"
)

// planCacheTTL is how long a limiter keeps a key's plan before it looks
// it up again in the catalog (sluice.WithPolicyCache): a lookup in
// memory, so short costs little, and it adds to the propagation bound.
const planCacheTTL = 500 * time.Millisecond

// planCacheKeys bounds the keys whose plan a limiter keeps; past them a
// key's plan is looked up again, in memory.
const planCacheKeys = 100_000

// maxImportBody bounds the body of POST /api/v1/plans, in bytes.
const maxImportBody = 8 << 20

// planMetrics are the plans' series.
type planMetrics struct {
	count      *prometheus.GaugeVec
	changes    *prometheus.CounterVec
	lag        prometheus.Histogram
	syncErrors prometheus.Counter
}

func newPlanMetrics(reg *prometheus.Registry) planMetrics {
	f := metricnames.PlansFamily
	m := planMetrics{
		count:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: f.Name, Help: f.Help}, f.Labels),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricnames.PlanChangesFamily.Name, Help: metricnames.PlanChangesFamily.Help}, metricnames.PlanChangesFamily.Labels),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: metricnames.PlanPropagationFamily.Name, Help: metricnames.PlanPropagationFamily.Help,
			Buckets: metricnames.PlanPropagationBuckets()}),
		syncErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: metricnames.PlanSyncErrorsFamily.Name, Help: metricnames.PlanSyncErrorsFamily.Help}),
	}
	reg.MustRegister(m.count, m.changes, m.lag, m.syncErrors)
	return m
}

// planFunc is the policy of a key of the config's limiter l: the stored
// plan of exactly the key, else l's override of exactly the key, else
// the longest prefix of the stored plans' and l's overrides' (the stored
// plan's on a tie), else l's own (nil). For a limiter that Envoy reaches
// (envoy), a stored plan that takes slots is passed over as if it were
// not there: Envoy would never give a slot back. Only a process whose
// config keeps the limiter from Envoy can have written one, and
// checkSlotPlans and syncPlans say so.
func (s *Server) planFunc(l config.Limiter, envoy bool) sluice.PolicyFunc {
	name := l.Name
	usable := func(p sluice.Policy) bool { return !envoy || !takesSlots(p) }
	return func(_ context.Context, key string) (sluice.Policy, error) {
		if p, ok := s.plans.Exact(name, key); ok && usable(p) {
			return p, nil
		}
		var best sluice.Policy
		bestLen := -1
		for _, o := range l.Overrides {
			switch {
			case !o.Prefix && o.Key == key:
				return o.Policy, nil
			case o.Prefix && strings.HasPrefix(key, o.Key) && len(o.Key) > bestLen:
				best, bestLen = o.Policy, len(o.Key)
			}
		}
		if p, n, ok := s.plans.Prefix(name, key); ok && n >= bestLen && usable(p) {
			return p, nil
		}
		return best, nil
	}
}

// checkSlotPlans refuses a reload whose limiter l is reached by an Envoy
// service while the store keeps a plan of l that takes slots, which that
// service would never give back (slotsPlan refuses to write one): the
// plan must go first. It checks the plans as this process read them last.
// A process that starts so is not refused, so that a plan written
// elsewhere cannot keep a fleet down: planFunc passes the plan over and
// logSlotPlans logs it.
func (s *Server) checkSlotPlans(l config.Limiter, service string) error {
	if service == "" {
		return nil
	}
	p, ok := s.plans.First(l.Name, takesSlots)
	if !ok {
		return nil
	}
	flag := ""
	if p.Prefix {
		flag = "--prefix "
	}
	return &config.Error{Path: "limiters." + l.Name, Line: l.Line, Column: l.Column,
		Msg: fmt.Sprintf("%s reaches it, and its stored %s takes slots, which %s never gives back: delete the plan first (sluice plans delete %s%s %q), then reload (SIGHUP)",
			service, describePlan(p), service, flag, l.Name, p.Key)}
}

// describePlan names plan p for a message.
func describePlan(p plans.Plan) string {
	return fmt.Sprintf("plan for the %s %q (version %d, %s)", keyOrPrefix(p.Prefix), p.Key, p.Version, p.Spec)
}

// syncPlans reads the plans' changes once, counting a failure.
func (s *Server) syncPlans(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	head, err := s.plans.Sync(ctx)
	if err != nil {
		s.planMetrics.syncErrors.Inc()
	}
	if snap := s.cur.Load(); snap != nil {
		counts := s.plans.Counts()
		for _, name := range snap.order {
			s.planMetrics.count.WithLabelValues(name).Set(float64(counts[name]))
		}
		if head != s.planHead {
			s.logSlotPlans(snap)
		}
	}
	s.planHead = head
	return err
}

// logSlotPlans logs, once each, the plans that take slots of the
// limiters Envoy reaches: another process, whose config keeps the
// limiter from Envoy, wrote them, and planFunc passes them over here.
func (s *Server) logSlotPlans(snap *snapshot) {
	for _, name := range snap.order {
		l := snap.limiters[name]
		if l.envoy == "" || l.resolve == nil {
			continue
		}
		p, ok := s.plans.First(name, takesSlots)
		if !ok || s.slotPlans[name] == p {
			continue
		}
		if s.slotPlans == nil {
			s.slotPlans = make(map[string]plans.Plan)
		}
		s.slotPlans[name] = p
		s.log.Error("a stored plan takes slots, which Envoy never gives back: the limiter's config decides for its keys instead; "+
			"delete the plan, or keep the limiter from Envoy in every process's config", "limiter", name, "service", l.envoy,
			"plan", describePlan(p))
	}
}

// pollPlans follows the plans' change log until ctx ends, every
// server.plans.poll_interval, logging a failure once until a read
// succeeds again.
func (s *Server) pollPlans(ctx context.Context) {
	failing := false
	for {
		cfg := s.cur.Load().cfg
		t := time.NewTimer(cfg.Plans.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if !cfg.Plans.Enabled {
			continue
		}
		err := s.syncPlans(ctx)
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			s.log.Error("reading the plans' changes failed; the plans stay as last read", "err", err)
		case err == nil && failing:
			s.log.Info("reading the plans' changes works again")
		}
		failing = err != nil
	}
}

// planRoutes serves /api/v1/plans: the plans of the store, read by any
// token and written by an admin token.
func (s *Server) planRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /api/v1/plans/{limiter}", s.planHandler(false, s.listPlans))
	mux.Handle("GET /api/v1/plans/{limiter}/{key...}", s.planHandler(false, s.getPlan))
	mux.Handle("PUT /api/v1/plans/{limiter}/{key...}", s.planHandler(true, s.putPlan))
	mux.Handle("DELETE /api/v1/plans/{limiter}/{key...}", s.planHandler(true, s.deletePlan))
	mux.Handle("POST /api/v1/plans", s.planHandler(true, s.importPlans))
	mux.HandleFunc("/api/v1/plans", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "POST")
		writeError(w, errorf(http.StatusMethodNotAllowed, codeMethod, "%s takes POST, not %s", r.URL.Path, r.Method))
	})
	mux.HandleFunc("/api/v1/plans/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "GET, PUT, DELETE")
		writeError(w, errorf(http.StatusMethodNotAllowed, codeMethod,
			"%s takes GET /api/v1/plans/{limiter} and GET, PUT or DELETE /api/v1/plans/{limiter}/{key}, not %s", short(r.URL.Path), r.Method))
	})
	return mux
}

// planHandler runs h when plans are on, and for a write (admin) when the
// request carries an admin token; h gets the token's name.
func (s *Server) planHandler(admin bool, h func(w http.ResponseWriter, r *http.Request, who string) *apiError) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		snap := s.cur.Load()
		if !snap.cfg.Plans.Enabled {
			writeError(w, errorf(http.StatusNotFound, codeNotFound, "plans are turned off on this server (server.plans.enabled)"))
			return
		}
		who := ""
		if admin {
			var e *apiError
			if who, e = snap.admin(r.Header.Get("Authorization")); e != nil {
				writeError(w, e)
				return
			}
		}
		if r.URL.Path != "/api/v1/plans" { // an import's time is bounded by write_timeout
			ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		if e := h(w, r, who); e != nil {
			writeError(w, e)
		}
	})
}

// adminToken is an admin token and the name the audit log gives it.
type adminToken struct {
	name  string
	token []byte
}

// admin returns the name of the admin token of an Authorization value,
// or a 403.
func (snap *snapshot) admin(header string) (string, *apiError) {
	if len(snap.admins) == 0 {
		return "", errorf(http.StatusForbidden, codeForbidden, "plan writes need an admin token, and none is configured (server.auth.admin_tokens)")
	}
	name, ok := snap.adminName(header)
	if !ok {
		return "", errorf(http.StatusForbidden, codeForbidden, "plan writes need an admin token (server.auth.admin_tokens); this one may only decide")
	}
	return name, nil
}

// adminName returns the name of the admin token of an Authorization
// value, "Bearer TOKEN" as validToken reads it, comparing it with every
// admin token in constant time.
func (snap *snapshot) adminName(header string) (string, bool) {
	scheme, got, ok := strings.Cut(strings.Trim(header, " \t"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	got = strings.TrimLeft(got, " ")
	name := ""
	for _, a := range snap.admins {
		if subtle.ConstantTimeCompare([]byte(got), a.token) == 1 {
			name = a.name
		}
	}
	return name, name != ""
}

// PlanInfo is a plan as the API shows it.
type PlanInfo struct {
	Limiter string          `json:"limiter"`
	Key     string          `json:"key"`
	Prefix  bool            `json:"prefix"`
	Policy  json.RawMessage `json:"policy"`
	Version uint64          `json:"version"`
}

func planInfo(p plans.Plan) PlanInfo {
	return PlanInfo{Limiter: p.Limiter, Key: p.Key, Prefix: p.Prefix, Policy: json.RawMessage(p.Spec), Version: p.Version}
}

// planTarget reads the limiter and the key or prefix of a plan request.
func (s *Server) planTarget(r *http.Request) (*limiter, string, bool, *apiError) {
	name, key := r.PathValue("limiter"), r.PathValue("key")
	prefix := false
	switch v := r.URL.Query().Get("prefix"); v {
	case "", "false":
	case "true":
		prefix = true
	default:
		return nil, "", false, errorf(http.StatusBadRequest, codeInvalidRequest, "prefix must be true or false, got %s", short(v))
	}
	l, e := keyRequest{Limiter: name, Key: key}.find(s.cur.Load())
	return l, key, prefix, e
}

// slotsPlan refuses a plan whose policy, spec, takes slots for a limiter
// that an Envoy service reaches, which would never give them back: a
// limit per ttl instead of in flight. A spec that does not compile is
// left for the catalog to refuse.
func slotsPlan(l *limiter, spec []byte) *apiError {
	if l.envoy == "" {
		return nil
	}
	if p, _, err := plans.Compile(spec); err == nil && takesSlots(p) {
		return errorf(http.StatusBadRequest, codeUnsupported, "limiter %s serves %s, which never gives a slot back: its plans must not take slots, got %v",
			short(l.name), l.envoy, p)
	}
	return nil
}

// ifMatch reads the If-Match header: nil without one, the version of
// "N" (an ETag) or N.
func ifMatch(r *http.Request) (*uint64, *apiError) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(strings.Trim(strings.TrimPrefix(v, "W/"), `"`), 10, 64)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, codeInvalidRequest, "If-Match must be a plan's version, got %s", short(v))
	}
	return &n, nil
}

func (s *Server) writePlan(w http.ResponseWriter, p plans.Plan) {
	w.Header().Set("ETag", `"`+strconv.FormatUint(p.Version, 10)+`"`)
	writeJSON(w, http.StatusOK, planInfo(p))
}

// planError answers an error of the catalog.
func (s *Server) planError(r *http.Request, err error) *apiError {
	var se *plans.SpecError
	switch {
	case errors.As(err, &se):
		return errorf(http.StatusBadRequest, codeInvalidRequest, "%v", err)
	case errors.Is(err, plans.ErrPrecondition):
		return errorf(http.StatusPreconditionFailed, codePrecondition, "the plan is not at the version of If-Match")
	case errors.Is(err, plans.ErrNotFound):
		return errorf(http.StatusNotFound, codeNotFound, "no such plan")
	}
	return s.limiterError(r, &sluice.StoreError{Op: "plans", Err: err})
}

func (s *Server) getPlan(w http.ResponseWriter, r *http.Request, _ string) *apiError {
	l, key, prefix, e := s.planTarget(r)
	if e != nil {
		return e
	}
	p, err := s.plans.Get(r.Context(), l.name, key, prefix)
	if err != nil {
		return s.planError(r, err)
	}
	s.writePlan(w, p)
	return nil
}

func (s *Server) putPlan(w http.ResponseWriter, r *http.Request, who string) *apiError {
	l, key, prefix, e := s.planTarget(r)
	if e != nil {
		return e
	}
	if l.leased {
		return errorf(http.StatusBadRequest, codeUnsupported, "limiter %s is leased (lease:), which takes no plans", short(l.name))
	}
	match, e := ifMatch(r)
	if e != nil {
		return e
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "the body is larger than %d bytes", maxBody)
	}
	if err := checkUnicode(body); err != nil {
		return errorf(http.StatusBadRequest, codeInvalidRequest, "body: %v", err)
	}
	if e := slotsPlan(l, body); e != nil {
		return e
	}
	ch, err := s.plans.Put(r.Context(), plans.Plan{Limiter: l.name, Key: key, Prefix: prefix, Spec: string(body)}, match)
	s.audit("put", who, l.name, key, prefix, ch, err)
	if err != nil {
		return s.planError(r, err)
	}
	s.writePlan(w, *ch.New)
	return nil
}

func (s *Server) deletePlan(w http.ResponseWriter, r *http.Request, who string) *apiError {
	l, key, prefix, e := s.planTarget(r)
	if e != nil {
		return e
	}
	match, e := ifMatch(r)
	if e != nil {
		return e
	}
	ch, err := s.plans.Delete(r.Context(), l.name, key, prefix, match)
	s.audit("delete", who, l.name, key, prefix, ch, err)
	if err != nil {
		return s.planError(r, err)
	}
	writeJSON(w, http.StatusOK, struct {
		Deleted PlanInfo `json:"deleted"`
	}{planInfo(*ch.Old)})
	return nil
}

// audit logs a plan write and counts it.
func (s *Server) audit(op, who, name, key string, prefix bool, ch plans.Change, err error) {
	result := "changed"
	switch {
	case errors.Is(err, plans.ErrPrecondition):
		result = "precondition_failed"
	case err != nil:
		result = "error"
	case ch.Old != nil && ch.New != nil && ch.Old.Version == ch.New.Version:
		result = "unchanged"
	}
	s.planMetrics.changes.WithLabelValues(op, result).Inc()
	var oldV, newV uint64
	if ch.Old != nil {
		oldV = ch.Old.Version
	}
	if ch.New != nil {
		newV = ch.New.Version
	}
	attrs := []any{"who", who, "op", op, "limiter", name, "key", key, "prefix", prefix, "result", result, "old_version", oldV, "new_version", newV}
	if ch.New != nil {
		attrs = append(attrs, "policy", ch.New.Spec)
	}
	if err != nil {
		attrs = append(attrs, "err", err)
		s.log.Warn("plan write", attrs...)
		return
	}
	s.log.Info("plan write", attrs...)
}

// maxListLimit bounds a page of GET /api/v1/plans/{limiter}.
const maxListLimit = 1000

// listPlans serves a page of a limiter's plans, from this process's
// view: ?limit=N (100 by default) after ?after=CURSOR, the next page's
// cursor in the answer's next (absent on the last page).
func (s *Server) listPlans(w http.ResponseWriter, r *http.Request, _ string) *apiError {
	name := r.PathValue("limiter")
	if _, ok := s.cur.Load().limiters[name]; !ok {
		return errorf(http.StatusNotFound, codeUnknownLimiter, "no limiter %s", short(name))
	}
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return errorf(http.StatusBadRequest, codeInvalidRequest, "limit must be 1 to %d, got %s", maxListLimit, short(v))
		}
		limit = n
	}
	var after *plans.Plan
	if v := q.Get("after"); v != "" {
		kind, key, ok := strings.Cut(v, ":")
		if !ok || kind != "key" && kind != "prefix" {
			return errorf(http.StatusBadRequest, codeInvalidRequest, "after must be a cursor of a previous page (key:K or prefix:P), got %s", short(v))
		}
		after = &plans.Plan{Key: key, Prefix: kind == "prefix"}
	}
	page := s.plans.List(name, after, limit+1)
	out := struct {
		Plans []PlanInfo `json:"plans"`
		Next  string     `json:"next,omitempty"`
	}{Plans: []PlanInfo{}}
	for i, p := range page {
		if i == limit {
			last := page[i-1]
			out.Next = "key:" + last.Key
			if last.Prefix {
				out.Next = "prefix:" + last.Key
			}
			break
		}
		out.Plans = append(out.Plans, planInfo(p))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// importItem is a plan of POST /api/v1/plans.
type importItem struct {
	Limiter string          `json:"limiter"`
	Key     string          `json:"key"`
	Prefix  bool            `json:"prefix"`
	Policy  json.RawMessage `json:"policy"`
}

// importWorkers is how many shards an import writes at once.
const importWorkers = 8

// importPlans writes many plans at once, {"plans": [{"limiter", "key",
// "prefix", "policy"}, ...]}: all checked before any is written, then
// one store write per shard. Plans already as given are left alone.
func (s *Server) importPlans(w http.ResponseWriter, r *http.Request, who string) *apiError {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxImportBody))
	if err != nil {
		return errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "the body is larger than %d bytes", maxImportBody)
	}
	if err := checkUnicode(body); err != nil {
		return errorf(http.StatusBadRequest, codeInvalidRequest, "body: %v", err)
	}
	var q struct {
		Plans []importItem `json:"plans"`
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return errorf(http.StatusBadRequest, codeInvalidRequest, "body: %v", err)
	}
	snap := s.cur.Load()
	ps := make([]plans.Plan, 0, len(q.Plans))
	for i, it := range q.Plans {
		l, e := keyRequest{Limiter: it.Limiter, Key: it.Key}.find(snap)
		if e != nil {
			e.Msg = clip("plans["+strconv.Itoa(i)+"]: "+e.Msg, maxMessage)
			return e
		}
		if l.leased {
			return errorf(http.StatusBadRequest, codeUnsupported, "plans[%d]: limiter %s is leased (lease:), which takes no plans", i, short(l.name))
		}
		if _, _, err := plans.Compile(it.Policy); err != nil {
			return errorf(http.StatusBadRequest, codeInvalidRequest, "plans[%d]: %v", i, err)
		}
		if e := slotsPlan(l, it.Policy); e != nil {
			e.Msg = clip("plans["+strconv.Itoa(i)+"]: "+e.Msg, maxMessage)
			return e
		}
		ps = append(ps, plans.Plan{Limiter: l.name, Key: it.Key, Prefix: it.Prefix, Spec: string(it.Policy)})
	}
	n, err := s.plans.Import(r.Context(), ps, importWorkers)
	s.planMetrics.changes.WithLabelValues("import", "changed").Add(float64(n))
	attrs := []any{"who", who, "op", "import", "plans", len(ps), "changed", n}
	if err != nil {
		s.log.Warn("plan write", append(attrs, "err", err)...)
		return s.planError(r, err)
	}
	s.log.Info("plan write", attrs...)
	writeJSON(w, http.StatusOK, struct {
		Plans   int `json:"plans"`
		Changed int `json:"changed"`
	}{len(ps), n})
	return nil
}
