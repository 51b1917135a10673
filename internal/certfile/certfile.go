// Package certfile serves a TLS certificate from files that are replaced
// while the process runs, as cert-manager and Kubernetes secret volumes
// replace them, so a rotation needs no restart.
package certfile

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// CheckInterval is how often, at most, Reloader looks at the files again:
// a stat per handshake would be cheap, but a burst of handshakes needs one.
const CheckInterval = time.Second

// Reloader holds the certificate of a cert and key file pair and reads the
// pair again when either file changes (size, modification time, or the
// file it resolves to through a symlink swap). A pair that does not load,
// e.g. while a rotation has written the certificate but not yet the key,
// keeps the previous certificate in service and is tried again later.
type Reloader struct {
	certPath, keyPath string
	log               *slog.Logger
	now               func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string
	checked time.Time
}

// New loads the pair once and returns its Reloader; an error when the pair
// does not load now, since serving without a certificate is no option.
func New(certPath, keyPath string, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{certPath: certPath, keyPath: keyPath, log: log, now: time.Now}
	stamp, err := r.fileStamp()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("certificate %s and key %s: %w", certPath, keyPath, err)
	}
	r.cert, r.stamp, r.checked = &cert, stamp, r.now()
	return r, nil
}

func (r *Reloader) fileStamp() (string, error) {
	var stamp string
	for _, p := range []string{r.certPath, r.keyPath} {
		fi, err := os.Stat(p) // follows symlinks: a ..data swap changes the target
		if err != nil {
			return "", fmt.Errorf("certificate file: %w", err)
		}
		stamp += fmt.Sprintf("%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return stamp, nil
}

// GetCertificate is tls.Config.GetCertificate: the current certificate,
// read again first when the files changed since the last look.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= CheckInterval {
		r.checked = now
		r.refresh()
	}
	return r.cert, nil
}

// refresh reads the pair again when its files changed; r.mu is held.
func (r *Reloader) refresh() {
	stamp, err := r.fileStamp()
	if err != nil {
		r.log.Warn("TLS certificate files unreadable; serving the previous certificate", "cert_file", r.certPath, "err", err)
		return
	}
	if stamp == r.stamp {
		return
	}
	cert, err := tls.LoadX509KeyPair(r.certPath, r.keyPath)
	if err != nil {
		// Not remembered as seen: the next look tries again, so the other
		// half of a rotation is picked up when it lands.
		r.log.Warn("TLS certificate files changed but do not load; serving the previous certificate", "cert_file", r.certPath, "err", err)
		return
	}
	r.cert, r.stamp = &cert, stamp
	r.log.Info("TLS certificate reloaded", "cert_file", r.certPath, "not_after", leafNotAfter(&cert))
}

func leafNotAfter(c *tls.Certificate) string {
	if len(c.Certificate) == 0 {
		return ""
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return ""
	}
	return leaf.NotAfter.UTC().Format(time.RFC3339)
}

// LoadPool reads a PEM file of CA certificates into a pool; an error when
// it holds none, so a wrong file is never an empty (reject-all, or for
// clients trust-nothing) pool.
func LoadPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("CA file " + path + " holds no PEM certificate")
	}
	return pool, nil
}
