// Package serverlog is the proxy listener's http.Server.ErrorLog: it counts
// TLS handshake failures by reason and logs them at debug, rate-limited,
// instead of one warning each, and logs every other net/http server error
// as a warning.
//
// net/http reports a failed handshake only as a formatted line on ErrorLog
// ("http: TLS handshake error from ADDR: ERR", net/http's conn.serve), with
// no hook that carries the error value, so the reason is read from the
// text of crypto/tls's errors and alerts (Classify). A client that scans
// the port, a TCP health check or an expired client certificate would
// otherwise write a WARN line per connection.
package serverlog

import (
	"context"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/metrics"
)

// handshakePrefix starts net/http's line for a failed TLS handshake.
const handshakePrefix = "http: TLS handshake error from "

// DefaultInterval is the least time between two debug lines of one reason.
const DefaultInterval = 10 * time.Second

// Options configure New.
type Options struct {
	// Logger receives the lines; nil discards them.
	Logger *slog.Logger
	// Count is called once per failed handshake with its reason (one of
	// metrics.TLSHandshakeReasons), e.g. (*metrics.Metrics).TLSHandshakeError.
	Count func(reason string)
	// Interval is the least time between two debug lines of one reason;
	// 0 means DefaultInterval. The failures in between are counted and
	// their number is given on the next line ("suppressed").
	Interval time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// New returns the *log.Logger to set as http.Server.ErrorLog.
func New(opts Options) *log.Logger {
	w := &writer{log: opts.Logger, count: opts.Count, interval: opts.Interval, now: opts.Now, last: map[string]*limit{}}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.count == nil {
		w.count = func(string) {}
	}
	if w.interval <= 0 {
		w.interval = DefaultInterval
	}
	if w.now == nil {
		w.now = time.Now
	}
	return log.New(w, "", 0)
}

type limit struct {
	at         time.Time
	suppressed int
}

type writer struct {
	log      *slog.Logger
	count    func(string)
	interval time.Duration
	now      func() time.Time
	mu       sync.Mutex
	last     map[string]*limit
}

// Write receives one formatted line of the server (log.Logger calls Write
// once per line).
func (w *writer) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	rest, ok := strings.CutPrefix(line, handshakePrefix)
	if !ok {
		w.log.Warn(line)
		return len(p), nil
	}
	// ADDR: ERR; ADDR has no ": " (host:port, [v6]:port).
	remote, cause, _ := strings.Cut(rest, ": ")
	reason := Classify(cause)
	w.count(reason)
	if !w.log.Enabled(context.Background(), slog.LevelDebug) {
		return len(p), nil
	}
	now := w.now()
	w.mu.Lock()
	l := w.last[reason]
	if l == nil {
		l = &limit{}
		w.last[reason] = l
	}
	if !l.at.IsZero() && now.Sub(l.at) < w.interval {
		l.suppressed++
		w.mu.Unlock()
		return len(p), nil
	}
	suppressed := l.suppressed
	l.at, l.suppressed = now, 0
	w.mu.Unlock()
	w.log.Debug("TLS handshake failed", "reason", reason, "remote", remote, "err", cause, "suppressed", suppressed)
	return len(p), nil
}

// Classify maps the error text of a failed handshake, as net/http logs it,
// to one of metrics.TLSHandshakeReasons. Local failures (crypto/tls and
// crypto/x509 errors) and the peer's alerts ("remote error: tls: ...", RFC
// 8446 section 6.2) map to the same reason.
func Classify(cause string) string {
	c := strings.ToLower(cause)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(c, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("client sent an http request to an https server", "first record does not look like a tls handshake",
		"oversized record received"):
		return metrics.TLSNotTLS
	case has("unsupported sslv2 handshake", "offered only unsupported versions", "protocol version not supported",
		"inappropriate protocol fallback", "unsupported versions"):
		return metrics.TLSProtocolVersion
	case has("didn't provide a certificate", "certificate required"):
		return metrics.TLSNoCertificate
	case has("certificate has expired", "not yet valid", "expired certificate"):
		return metrics.TLSExpired
	case has("signed by unknown authority", "unknown certificate authority"):
		return metrics.TLSUnknownCA
	case has("certificate", "x509:"):
		return metrics.TLSBadCertificate
	case has("i/o timeout", "deadline exceeded"):
		return metrics.TLSTimeout
	case c == "eof" || has("unexpected eof", "connection reset", "broken pipe", "use of closed network connection"):
		return metrics.TLSClosed
	}
	return metrics.TLSOther
}
