package api

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mesh/models"
)

// DefaultMetricsMaxAge is how long one read of the fleet serves scrapes:
// several Prometheus servers (or a dashboard's refreshes) scraping every
// replica do not multiply the store's load.
const DefaultMetricsMaxAge = 5 * time.Second

// tierFoldAfter is how long a plan must have been finished before its
// tiers are folded into the histogram for good and no longer read: past
// any transaction that could still commit a plan with a lower id (ids
// are handed out before commit, so on PostgreSQL they may become visible
// out of order).
const tierFoldAfter = 2 * time.Minute

// tierBuckets are the bounds of mesh_plan_tier_duration_seconds: from a
// canary that applies at once to a tier that takes its whole deadline
// (10 minutes by default) and more.
var tierBuckets = []float64{5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600}

// fleetCollector exports the fleet as the store records it, computed at
// scrape time — never on the poll path, whose idle polls touch no store.
// One read (three statements in one snapshot, none per machine) serves
// every scrape for MetricsMaxAge; concurrent scrapes wait for the one read
// in flight rather than issuing their own.
//
// Every replica reports the same fleet: aggregate these with max (or pick
// one instance), not sum. The state of a machine is the one the API says
// (Server.Rules, last seen from this instance's hub first, else the row).
//
// Tier durations come from the plan steps' times rather than an in-process
// histogram observed where a plan steps: so the histogram is the same on
// every replica and survives restarts, whichever instance stepped the
// plan. To keep each read bounded, the tiers of plans that can change no
// more are folded into totals kept here and never read again; only plans
// from the oldest one still open onwards are read.
type fleetCollector struct {
	srv *Server

	mu     sync.Mutex
	readAt time.Time
	last   []prometheus.Metric

	foldedUpTo int64                 // every plan with an id up to this is in folded
	folded     map[tierKey]*tierHist // tier durations of plans folded for good
	// foldedModule is the id of the module each name's folded tiers are of.
	foldedModule map[string]int64

	machines, health, plans, rollouts     *prometheus.Desc
	checksFailing, composeErrors, tierDur *prometheus.Desc
	up, readSeconds                       *prometheus.Desc
}

type tierKey struct{ module, outcome string }

// tierHist is a histogram's state: count, sum and cumulative bucket counts.
type tierHist struct {
	count   uint64
	sum     float64
	buckets []uint64 // cumulative, one per tierBuckets bound
}

func (h *tierHist) observe(v float64) {
	if h.buckets == nil {
		h.buckets = make([]uint64, len(tierBuckets))
	}
	h.count++
	h.sum += v
	for i, b := range tierBuckets {
		if v <= b {
			h.buckets[i]++
		}
	}
}

func (h *tierHist) add(o *tierHist) {
	if h.buckets == nil {
		h.buckets = make([]uint64, len(tierBuckets))
	}
	h.count += o.count
	h.sum += o.sum
	for i := range o.buckets {
		h.buckets[i] += o.buckets[i]
	}
}

func newFleetCollector(s *Server) *fleetCollector {
	return &fleetCollector{srv: s, folded: map[tierKey]*tierHist{}, foldedModule: map[string]int64{},
		machines: prometheus.NewDesc("mesh_machines", "Machines by state, as the API says it (every state word, zero included).", []string{"state"}, nil),
		health: prometheus.NewDesc("mesh_machines_health", "Machines by the health of their declared checks (passing, failing, none; unknown: offline or revoked, whose last report is no fact of now).",
			[]string{"health"}, nil),
		plans:    prometheus.NewDesc("mesh_plans", "Plans by state.", []string{"state"}, nil),
		rollouts: prometheus.NewDesc("mesh_rollouts", "Host rollouts by state.", []string{"state"}, nil),
		checksFailing: prometheus.NewDesc("mesh_checks_failing",
			"Machines a declared check of which is failing now (unhealthy once past the grace; offline and revoked machines are not counted).", nil, nil),
		composeErrors: prometheus.NewDesc("mesh_compose_errors",
			"Machines whose current generation cannot be composed (a variable missing, a build gone): nothing is sent to them.", nil, nil),
		tierDur: prometheus.NewDesc("mesh_plan_tier_duration_seconds",
			"How long a plan's tier took, from its first machine reached to its last judged, by module and outcome (completed, halted).",
			[]string{"module", "outcome"}, nil),
		up: prometheus.NewDesc("mesh_fleet_up",
			"1 when the last read of the fleet from the store succeeded; when 0 the fleet's metrics are left out.", nil, nil),
		readSeconds: prometheus.NewDesc("mesh_fleet_read_seconds", "How long the last read of the fleet from the store took.", nil, nil),
	}
}

// Describe sends every descriptor the collector may export.
func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.machines, c.health, c.plans, c.rollouts, c.checksFailing, c.composeErrors, c.tierDur, c.up, c.readSeconds} {
		ch <- d
	}
}

// Collect sends the fleet as last read, reading it again when older than
// MetricsMaxAge.
func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	maxAge := c.srv.MetricsMaxAge
	if maxAge <= 0 {
		maxAge = DefaultMetricsMaxAge
	}
	if c.last == nil || time.Since(c.readAt) >= maxAge {
		c.last, c.readAt = c.read(), time.Now()
	}
	ms := c.last
	c.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
}

// read reads the fleet from the store and turns it into metrics. A failed
// read exports mesh_fleet_up 0 and nothing else of the fleet (a stale
// count would say something false), and is itself kept for MaxAge, so a
// store in trouble is not asked again by every scrape.
func (c *fleetCollector) read() []prometheus.Metric {
	timeout := min(c.srv.StoreTimeout, 10*time.Second)
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	f, err := c.srv.Store.Fleet(ctx, c.foldedUpTo)
	took := prometheus.MustNewConstMetric(c.readSeconds, prometheus.GaugeValue, time.Since(start).Seconds())
	if err != nil {
		c.srv.Log.Warn("metrics: reading the fleet", "err", err)
		return []prometheus.Metric{prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0), took}
	}
	out := []prometheus.Metric{prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1), took}
	out = append(out, c.machineMetrics(f.Machines)...)
	gauges := func(d *prometheus.Desc, words []string, n map[string]int64) {
		for _, w := range words {
			out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(n[w]), w))
		}
		for _, w := range extraWords(words, n) {
			out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(n[w]), w))
		}
	}
	gauges(c.plans, models.PlanStates(), f.Plans)
	gauges(c.rollouts, models.RolloutStates(), f.Rollouts)
	return append(out, c.tierMetrics(f.Tiers, f.Modules, time.Now())...)
}

// healthUnknown is the health counted for a machine whose host is not
// heard (offline) or not listened to (revoked).
const healthUnknown = "unknown"

// machineMetrics counts machines by state and health, failing checks and
// compose errors.
func (c *fleetCollector) machineMetrics(ms []models.Machine) []prometheus.Metric {
	now := time.Now()
	states, health := map[string]int64{}, map[string]int64{}
	var failing, composeErrs int64
	for i := range ms {
		m := &ms[i]
		state := c.srv.Rules.State(m, c.srv.lastSeen(m), now)
		states[state]++
		h := m.Health
		if h == "" {
			h = models.HealthNone
		}
		if state == models.StateOffline || state == models.StateRevoked {
			// Its last report's health is no fact of now: an alert on
			// passing machines must not count one that stopped reporting.
			h = healthUnknown
		}
		health[h]++
		if h == models.HealthFailing {
			failing++
		}
		if m.ComposeErrorGen > 0 && m.ComposeErrorGen == m.Generation {
			composeErrs++
		}
	}
	var out []prometheus.Metric
	for _, w := range append(models.MachineStates(), extraWords(models.MachineStates(), states)...) {
		out = append(out, prometheus.MustNewConstMetric(c.machines, prometheus.GaugeValue, float64(states[w]), w))
	}
	words := append(models.HealthWords(), healthUnknown) // every word, zero included
	for _, w := range append(words, extraWords(words, health)...) {
		out = append(out, prometheus.MustNewConstMetric(c.health, prometheus.GaugeValue, float64(health[w]), w))
	}
	return append(out,
		prometheus.MustNewConstMetric(c.checksFailing, prometheus.GaugeValue, float64(failing)),
		prometheus.MustNewConstMetric(c.composeErrors, prometheus.GaugeValue, float64(composeErrs)))
}

// tierMetrics folds the tiers of plans that can change no more (in id
// order, up to the first still open) into c.folded for good, and exports
// those totals plus the ended tiers of the plans still open.
func (c *fleetCollector) tierMetrics(spans []models.TierSpan, modules map[string]int64, now time.Time) []prometheus.Metric {
	// A module deleted took its plans with it: its folded tiers go too
	// (by its id: one made again under its name has none), or this
	// instance exported them until it restarted while a replica that had
	// not folded them exported none.
	for k := range c.folded {
		if id, ok := modules[k.module]; !ok || id != c.foldedModule[k.module] {
			delete(c.folded, k)
		}
	}
	open := map[tierKey]*tierHist{}
	folding := true
	for i := 0; i < len(spans); {
		j := i
		for j < len(spans) && spans[j].PlanID == spans[i].PlanID {
			j++
		}
		p := spans[i]
		final := models.PlanFinal(p.PlanState) && p.PlanFinishedAt != nil && now.Sub(*p.PlanFinishedAt) > tierFoldAfter
		folding = folding && final
		into := open
		if folding {
			into = c.folded
			c.foldedUpTo = p.PlanID
			c.foldedModule[p.Module] = p.ModuleID
		}
		for _, t := range spans[i:j] {
			outcome, took, ended := t.Outcome()
			if !ended {
				continue
			}
			k := tierKey{t.Module, outcome}
			if into[k] == nil {
				into[k] = &tierHist{}
			}
			into[k].observe(took.Seconds())
		}
		i = j
	}
	keys := map[tierKey]bool{}
	for k := range c.folded {
		keys[k] = true
	}
	for k := range open {
		keys[k] = true
	}
	sorted := make([]tierKey, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].module != sorted[j].module {
			return sorted[i].module < sorted[j].module
		}
		return sorted[i].outcome < sorted[j].outcome
	})
	out := make([]prometheus.Metric, 0, len(sorted))
	for _, k := range sorted {
		var h tierHist
		if f := c.folded[k]; f != nil {
			h.add(f)
		}
		if o := open[k]; o != nil {
			h.add(o)
		}
		b := make(map[float64]uint64, len(tierBuckets))
		for i, bound := range tierBuckets {
			b[bound] = h.buckets[i]
		}
		out = append(out, prometheus.MustNewConstHistogram(c.tierDur, h.count, h.sum, b, k.module, k.outcome))
	}
	return out
}

// extraWords are the keys of n that words does not list (a word a newer
// build wrote to the store), sorted, so they are exported too.
func extraWords(words []string, n map[string]int64) []string {
	known := map[string]bool{}
	for _, w := range words {
		known[w] = true
	}
	var extra []string
	for w := range n {
		if !known[w] {
			extra = append(extra, w)
		}
	}
	sort.Strings(extra)
	return extra
}

// sendsCollector exports mesh_sends_total by trigger from the send writer:
// counted where the rows are committed, so only a poll that sends costs
// anything.
type sendsCollector struct {
	w    *SendWriter
	desc *prometheus.Desc
}

func newSendsCollector(w *SendWriter) *sendsCollector {
	return &sendsCollector{w: w, desc: prometheus.NewDesc("mesh_sends_total",
		"Declarations sent (send rows committed) by this instance, by what made the generation (its trigger).", []string{"trigger"}, nil)}
}

func (c *sendsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *sendsCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.w.ByTrigger()
	for _, t := range append(models.Triggers(), extraWords(models.Triggers(), n)...) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n[t]), t)
	}
}
