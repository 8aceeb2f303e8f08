// Package obs is the daemon's observability: its Prometheus metrics, the
// request id every request carries (in its logs too), and the audit log
// of mutating calls.
package obs

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Gauges is what the daemon reads at each scrape: sandboxes by state and
// tenant, and warm pool sizes by snapshot tag. Read at scrape time, not
// kept in step, so the figures cannot drift from the service's own.
type Gauges struct {
	SandboxStates func() map[SandboxKey]int
	PoolSizes     func() map[string]int
}

// SandboxKey is the labels of the sandbox gauge: tenants, never sandbox
// ids, so its cardinality stays bounded.
type SandboxKey struct{ State, Tenant string }

// Metrics is the daemon's registry and the instruments the API feeds. It
// is owned by the daemon (no global registry), one per API server.
type Metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	errors    *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	operation *prometheus.HistogramVec
	agentRTT  prometheus.Histogram
}

// opBuckets spans a warm-pool hit (ms) to a QEMU/TCG boot or checkpoint
// (tens of seconds).
var opBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// NewMetrics returns a registry holding the Go runtime and process
// collectors, the API's instruments, and g's gauges.
func NewMetrics(g Gauges) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cove_http_requests_total", Help: "API requests by route pattern and status.",
		}, []string{"route", "status"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cove_http_errors_total", Help: "API requests answered with an error, by route pattern and error code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cove_http_request_duration_seconds", Help: "API request latency by route pattern.", Buckets: opBuckets,
		}, []string{"route"}),
		operation: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cove_operation_duration_seconds", Help: "Latency of successful sandbox operations (create, spawn, exec, branch, checkpoint, pause, resume).", Buckets: opBuckets,
		}, []string{"op"}),
		agentRTT: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cove_agent_rtt_seconds", Help: "Round-trip time of pings to sandbox agents.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.errors, m.duration, m.operation, m.agentRTT, &gaugeCollector{g: g})
	return m
}

// Registry is the daemon's registry, for more collectors and for tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveRequest counts one request to route (a mux pattern, or "" for
// none: bounded cardinality) answered with status and, for an error, code.
// A success also counts for op, or for the operation route is if op is "".
func (m *Metrics) ObserveRequest(route, op string, status int, code string, d time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(route, statusLabel(status)).Inc()
	if status >= 400 {
		if code == "" {
			code = "unknown"
		}
		m.errors.WithLabelValues(route, code).Inc()
	}
	m.duration.WithLabelValues(route).Observe(d.Seconds())
	if op == "" {
		op = Operation(route)
	}
	if op != "" && status < 400 {
		m.operation.WithLabelValues(op).Observe(d.Seconds())
	}
}

// ObserveAgentRTT records one agent ping's round trip.
func (m *Metrics) ObserveAgentRTT(d time.Duration) { m.agentRTT.Observe(d.Seconds()) }

// operations names the routes whose latency is an operation's. Read only.
var operations = map[string]string{
	"POST /v1/sandboxes":                  "create",
	"POST /sandboxes":                     "create",
	"POST /v1/sandboxes/{id}/exec":        "exec",
	"POST /sandboxes/{id}/exec":           "exec",
	"POST /v1/sandboxes/{id}/branch":      "branch",
	"POST /v1/sandboxes/{id}/snapshot":    "snapshot",
	"POST /v1/sandboxes/{id}/checkpoints": "checkpoint",
	"POST /v1/sandboxes/{id}/pause":       "pause",
	"POST /v1/sandboxes/{id}/resume":      "resume",
	"POST /v1/snapshots":                  "snapshot_build",
	"POST /v1/sandboxes/{id}/rollback":    "rollback",
	"POST /v1/templates":                  "template_build",
}

// Operation is the operation route is, or "".
func Operation(route string) string { return operations[route] }

// OperationRoutes lists the routes that are operations, for a test that
// the API serves each.
func OperationRoutes() []string {
	out := make([]string, 0, len(operations))
	for r := range operations {
		out = append(out, r)
	}
	return out
}

func statusLabel(status int) string {
	if status == 0 {
		status = http.StatusOK
	}
	return strconv.Itoa(status)
}

// gaugeCollector reads the Gauges at each scrape.
type gaugeCollector struct{ g Gauges }

var (
	sandboxesDesc = prometheus.NewDesc("cove_sandboxes", "Sandboxes the daemon holds, by state and tenant.", []string{"state", "tenant"}, nil)
	poolDesc      = prometheus.NewDesc("cove_pool_ready", "Warm sandboxes ready in a snapshot's pool.", []string{"snapshot"}, nil)
)

func (c *gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sandboxesDesc
	ch <- poolDesc
}

func (c *gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	if c.g.SandboxStates != nil {
		for k, n := range c.g.SandboxStates() {
			ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n), k.State, k.Tenant)
		}
	}
	if c.g.PoolSizes != nil {
		for tag, n := range c.g.PoolSizes() {
			ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(n), tag)
		}
	}
}
