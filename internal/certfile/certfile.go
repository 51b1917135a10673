// Package certfile serves a TLS certificate and CA pools from files that are
// replaced while the process runs, as cert-manager and Kubernetes secret
// volumes replace them, so a rotation needs no restart.
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
	name              string
	observe           Observer

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

// Observer is told the outcome of every attempt to load files that changed
// (or were read again on request): name is what the caller called them
// (Named, NewPool), ok whether they loaded. cmd counts these in
// idemgate_tls_reloads_total.
type Observer func(name string, ok bool)

// Named sets the name the Reloader's log lines and Observer calls carry
// (a config key such as "upstream.tls.cert_file") and its Observer (nil:
// none). Call it before the Reloader is in use; it returns r.
func (r *Reloader) Named(name string, observe Observer) *Reloader {
	r.name, r.observe = name, observe
	return r
}

func (r *Reloader) fileStamp() (string, error) {
	return stampOf(r.certPath, r.keyPath)
}

// stampOf describes the files as a string that changes when any of them
// does: size and modification time of the file each path resolves to.
func stampOf(paths ...string) (string, error) {
	var stamp string
	for _, p := range paths {
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

// GetClientCertificate is tls.Config.GetClientCertificate: the current
// certificate, read again first when the files changed since the last
// look. It is presented whatever CAs the server names, as a single
// configured client certificate is; the server decides.
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.GetCertificate(nil)
}

// Reload reads the pair now, whether or not the files look changed (SIGHUP).
// A pair that does not load keeps the previous certificate in service.
func (r *Reloader) Reload() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked = r.now()
	r.stamp = ""
	r.refresh()
}

// refresh reads the pair again when its files changed; r.mu is held.
func (r *Reloader) refresh() {
	stamp, err := r.fileStamp()
	if err != nil {
		r.log.Warn("TLS certificate files unreadable; serving the previous certificate", "name", r.name, "cert_file", r.certPath, "err", err)
		r.report(false)
		return
	}
	if stamp == r.stamp {
		return
	}
	cert, err := tls.LoadX509KeyPair(r.certPath, r.keyPath)
	if err != nil {
		// Not remembered as seen: the next look tries again, so the other
		// half of a rotation is picked up when it lands.
		r.log.Warn("TLS certificate files changed but do not load; serving the previous certificate", "name", r.name, "cert_file", r.certPath, "err", err)
		r.report(false)
		return
	}
	r.cert, r.stamp = &cert, stamp
	r.log.Info("TLS certificate reloaded", "name", r.name, "cert_file", r.certPath, "not_after", leafNotAfter(&cert))
	r.report(true)
}

func (r *Reloader) report(ok bool) {
	if r.observe != nil {
		r.observe(r.name, ok)
	}
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

// Pool holds the CA certificates of a PEM file and reads the file again
// when it changes (size, modification time, symlink target), at most once
// per CheckInterval, and on Reload. A file that does not load (unreadable,
// no certificate in it, a half-written bundle) keeps the previous pool in
// service and is tried again at the next look, so adding the next CA
// before the old one expires needs no restart and a bad write does not
// lock every client out.
type Pool struct {
	path, name string
	log        *slog.Logger
	observe    Observer
	now        func() time.Time

	mu      sync.Mutex
	pool    *x509.CertPool
	stamp   string
	checked time.Time
}

// NewPool loads path once and returns its Pool; name (a config key such as
// "server.tls.client_ca_file") appears in log lines and Observer calls. An
// error when the file does not load now.
func NewPool(path, name string, log *slog.Logger, observe Observer) (*Pool, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pool{path: path, name: name, log: log, observe: observe, now: time.Now}
	stamp, err := stampOf(path)
	if err != nil {
		return nil, err
	}
	pool, err := LoadPool(path)
	if err != nil {
		return nil, err
	}
	p.pool, p.stamp, p.checked = pool, stamp, p.now()
	return p, nil
}

// Current returns the pool in service, read again first when the file
// changed since the last look. The pointer changes only when a new file
// loaded, so callers may cache what they derive from it per pointer.
func (p *Pool) Current() *x509.CertPool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := p.now(); now.Sub(p.checked) >= CheckInterval {
		p.checked = now
		p.refresh()
	}
	return p.pool
}

// Reload reads the file now, whether or not it looks changed (SIGHUP).
func (p *Pool) Reload() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checked = p.now()
	p.stamp = ""
	p.refresh()
}

// refresh reads the file again when it changed; p.mu is held.
func (p *Pool) refresh() {
	stamp, err := stampOf(p.path)
	if err != nil {
		p.log.Warn("CA file unreadable; keeping the previous CAs in service", "name", p.name, "path", p.path, "err", err)
		p.report(false)
		return
	}
	if stamp == p.stamp {
		return
	}
	pool, err := LoadPool(p.path)
	if err != nil {
		// Not remembered as seen: the next look tries again.
		p.log.Warn("CA file changed but does not load; keeping the previous CAs in service", "name", p.name, "path", p.path, "err", err)
		p.report(false)
		return
	}
	p.pool, p.stamp = pool, stamp
	p.log.Info("CA file reloaded", "name", p.name, "path", p.path)
	p.report(true)
}

func (p *Pool) report(ok bool) {
	if p.observe != nil {
		p.observe(p.name, ok)
	}
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
