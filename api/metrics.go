package api

import (
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics builds this server's registry (no global state): open polls,
// machines known, store statements, bumps heard and composed, sends, and
// the Go runtime's own.
func (s *Server) metrics() echo.HandlerFunc {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mesh_polls_open", Help: "Host long polls this instance holds now.",
	}, func() float64 { return float64(s.Hub.OpenPolls()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mesh_machines", Help: "Machines this instance knows.",
	}, func() float64 { return float64(s.Hub.Machines()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "mesh_store_statements_total", Help: "Statements issued to the store.",
	}, func() float64 { return float64(s.Store.Statements()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "mesh_bumps_heard_total", Help: "Generation bumps heard, in process and from the store's notifications.",
	}, func() float64 { return float64(s.Hub.Heard()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "mesh_composed_ahead_total", Help: "Machines composed ahead of their polls and woken after a bump.",
	}, func() float64 { return float64(s.Hub.ComposedAhead()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "mesh_sends_total", Help: "Declarations sent (send rows written) by this instance.",
	}, func() float64 { return float64(s.Sends.Written()) }))
	return echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}
