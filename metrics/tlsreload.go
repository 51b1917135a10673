package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// TLSFileKeys are the config keys whose files idemgate reads again when they
// change; the label values of idemgate_tls_reloads_total's file label.
var TLSFileKeys = []string{"server.tls.cert_file", "server.tls.client_ca_file", "upstream.tls.ca_file", "upstream.tls.cert_file"}

// TLSReloads counts reload attempts of certificate and CA files
// (idemgate_tls_reloads_total{file, result}). A nil *TLSReloads records
// nothing.
type TLSReloads struct {
	c *prometheus.CounterVec
}

// NewTLSReloads registers idemgate_tls_reloads_total on reg, with both
// results of every key in TLSFileKeys at 0, so an alert on failures is
// defined before the first one.
func NewTLSReloads(reg prometheus.Registerer) (*TLSReloads, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idemgate_tls_reloads_total",
		Help: "Reloads of changed certificate and CA files (server.tls, upstream.tls) by config key and result: success (the new file is in service) or failure (it did not load; the previous one stays in service).",
	}, []string{"file", "result"})
	for _, k := range TLSFileKeys {
		c.WithLabelValues(k, "success")
		c.WithLabelValues(k, "failure")
	}
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("metrics: register: %w", err)
	}
	return &TLSReloads{c: c}, nil
}

// Observe counts one reload attempt of the file of config key file; it has
// the shape of certfile.Observer.
func (t *TLSReloads) Observe(file string, ok bool) {
	if t == nil {
		return
	}
	result := "failure"
	if ok {
		result = "success"
	}
	t.c.WithLabelValues(file, result).Inc()
}
