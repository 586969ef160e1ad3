package api

import (
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"mesh/conns"
)

// metrics builds this server's registry (no global state): this
// instance's own work (open polls, machines in its hub, store statements,
// bumps heard and composed, sends by trigger), the fleet as the store
// records it (machines by state and health, plans and rollouts by state,
// failing checks, compose errors, plan tier durations; read at scrape time
// and cached, see fleetCollector), and the Go runtime's own. Nothing here
// runs on the poll path.
func (s *Server) metrics() echo.HandlerFunc {
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.collectors()...)
	return echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}

// collectors are everything /metrics exports.
func (s *Server) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{
		// The scheduler's metrics besides the defaults: how long runnable
		// goroutines wait for a CPU (go_sched_latencies_seconds), which is
		// what a loaded controller's answers wait on.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mesh_polls_open", Help: "Host long polls this instance holds now.",
		}, func() float64 { return float64(s.Hub.OpenPolls()) }),
		// Not mesh_machines: that name is the fleet's machines by state.
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mesh_hub_machines", Help: "Machines this instance's hub knows (all of them, once it has loaded).",
		}, func() float64 { return float64(s.Hub.Machines()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mesh_store_statements_total", Help: "Statements issued to the store.",
		}, func() float64 { return float64(s.Store.Statements()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mesh_bumps_heard_total", Help: "Generation bumps heard, in process and from the store's notifications.",
		}, func() float64 { return float64(s.Hub.Heard()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mesh_composed_ahead_total", Help: "Machines composed ahead of their polls and woken after a bump.",
		}, func() float64 { return float64(s.Hub.ComposedAhead()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mesh_sent_with_declaration_total", Help: "Sends whose row was written with their declaration, their parked polls answered by the goroutine that composed it.",
		}, func() float64 { return float64(s.Hub.SentWithDeclaration()) }),
		newSendsCollector(s.Sends), newFleetCollector(s),
	}
	// Read at scrape time: the listener is made after the routes.
	conn := func(f func(*conns.Listener) float64) func() float64 {
		return func() float64 {
			if s.Conns == nil {
				return 0
			}
			return f(s.Conns)
		}
	}
	cs = append(cs,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mesh_connections_open", Help: "Connections open now, of this instance's cap (--max-conns; 0 when there is none).",
		}, conn(func(l *conns.Listener) float64 { return float64(l.Open()) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mesh_connections_refused_total", Help: "New connections refused past this instance's cap (503, or under TLS a handshake error), probes past the reserve included.",
		}, conn(func(l *conns.Listener) float64 { return float64(l.Refused()) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "mesh_connections_evicted_total", Help: "Unknown connections waiting on their clients closed to make room for new ones past the cap.",
		}, conn(func(l *conns.Listener) float64 { return float64(l.Evicted()) })),
	)
	return cs
}
