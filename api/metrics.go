package api

import (
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics builds this server's registry (no global state): open polls,
// machines known, store statements, and the Go runtime's own.
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
		Name: "mesh_sends_total", Help: "Declarations sent (send rows written) by this instance.",
	}, func() float64 { return float64(s.Sends.Written()) }))
	return echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}
