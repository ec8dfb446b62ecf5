package coderd

import (
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	jobsAcquired prometheus.Counter
	jobsAwaited  prometheus.Gauge
	jobQueueWait prometheus.Histogram
	jobsFinished *prometheus.CounterVec
	relayConns   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "coderd", Subsystem: "api", Name: "requests_processed_total",
			Help: "HTTP requests served, by method, route and status.",
		}, []string{"method", "path", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "coderd", Subsystem: "api", Name: "request_latencies_seconds",
			Help: "HTTP request latency, by method and route.", Buckets: prometheus.DefBuckets,
		}, []string{"method", "path"}),
		jobsAcquired: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "coderd", Subsystem: "provisionerd", Name: "jobs_acquired_total",
			Help: "Provisioner jobs handed to daemons.",
		}),
		jobsAwaited: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "coderd", Subsystem: "provisionerd", Name: "acquires_waiting",
			Help: "Daemons waiting on this replica, in a long-poll acquire, for a job their tags match: idle capacity.",
		}),
		jobQueueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "coderd", Subsystem: "provisionerd", Name: "job_queue_wait_seconds",
			Help: "Time from a job's creation to a daemon acquiring it.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		jobsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "coderd", Subsystem: "provisionerd", Name: "jobs_finished_total",
			Help: "Provisioner jobs that ended, by status.",
		}, []string{"status"}),
		relayConns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "coderd", Subsystem: "relay", Name: "agent_connections_total",
			Help: "Connections opened to agents on this replica, by how: on a spare connection the agent dialed ahead (spare), as a stream of its session (stream), or through the workspace proxy it is connected to (proxy).",
		}, []string{"via"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.jobsAcquired, m.jobsAwaited, m.jobQueueWait, m.jobsFinished, m.relayConns)
	}
	return m
}

// instrument counts requests by route template (not raw path, which would
// explode label cardinality with ids).
func (api *API) instrument() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		api.metrics.requests.WithLabelValues(c.Request.Method, route, strconv.Itoa(c.Writer.Status())).Inc()
		api.metrics.duration.WithLabelValues(c.Request.Method, route).Observe(time.Since(start).Seconds())
	}
}
