package identity

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
	"golang.org/x/sync/singleflight"
)

// Defaults of JWKSOptions.
const (
	// DefaultJWKSFetchTimeout bounds one read of a JWK Set.
	DefaultJWKSFetchTimeout = 5 * time.Second
	// DefaultJWKSRefreshInterval is how old a fetched JWKS URL may get
	// before KeyRing.Run fetches it again.
	DefaultJWKSRefreshInterval = 5 * time.Minute
	// DefaultJWKSMinRefetchInterval is the least time between two reads of
	// one key set that unknown "kid"s cause, and between a failed read and
	// the next. Short enough that a key an issuer has just published is
	// taken on its first use (an earlier periodic read does not count
	// against it), long enough that tokens naming made-up key ids cost the
	// issuer at most one request per interval per instance; the common JWT
	// middlewares use a few seconds too.
	DefaultJWKSMinRefetchInterval = 5 * time.Second
	// DefaultJWKSPollInterval is how often KeyRing.Run looks at its key
	// sets; a jwks_file is read again on every look.
	DefaultJWKSPollInterval = 30 * time.Second
)

// maxJWKSBytes bounds a JWK Set document, in bytes.
const maxJWKSBytes = 1 << 20

// minRSABits is the smallest RSA modulus accepted for RS* and PS*, in bits
// (RFC 7518 section 3.3 requires 2048).
const minRSABits = 2048

// JWKSOptions configure how JWK Sets are read and cached (KeyRing,
// NewJWKSFile, NewJWKSURL). Client and Now are required; zero durations
// take the Default* values above.
type JWKSOptions struct {
	// Client fetches JWKS URLs; its own Timeout, if any, applies as well as
	// FetchTimeout.
	Client *http.Client
	// Now is the clock for token expiry and for the refetch limits.
	Now func() time.Time
	// Logger receives key set loads and read failures; nil discards.
	Logger *slog.Logger
	// FetchTimeout bounds one read of a key set.
	FetchTimeout time.Duration
	// RefreshInterval is how old a URL key set may get before KeyRing.Run
	// fetches it again.
	RefreshInterval time.Duration
	// MinRefetchInterval is the least time between reads of one key set
	// caused by unknown "kid"s (shared by all requests; reads by
	// KeyRing.Run do not count), and between a failed read and the next:
	// tokens naming made-up key ids cannot make idemgate hammer the issuer.
	MinRefetchInterval time.Duration
	// PollInterval is how often KeyRing.Run checks its key sets.
	PollInterval time.Duration
}

func (o JWKSOptions) withDefaults() (JWKSOptions, error) {
	if o.Client == nil || o.Now == nil {
		return o, errors.New("policy: JWKSOptions needs a Client and a Now clock")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.FetchTimeout, DefaultJWKSFetchTimeout)
	def(&o.RefreshInterval, DefaultJWKSRefreshInterval)
	def(&o.MinRefetchInterval, DefaultJWKSMinRefetchInterval)
	def(&o.PollInterval, DefaultJWKSPollInterval)
	return o, nil
}

// JWKS is a cached JSON Web Key Set (RFC 7517 section 5) read from a file
// or an http(s) URL: the public signing keys of a JWT issuer. Lookups read
// the cache without locks or IO; a lookup of an unknown "kid" reads the
// source again at once, with one read in flight for all callers and at most
// one such read per MinRefetchInterval, so a rotated key is picked up on
// its first use. A failed read keeps the keys read before. Safe for
// concurrent use.
type JWKS struct {
	file, url string
	shown     string // file path or redacted URL, for logs and errors
	opts      JWKSOptions

	keys atomic.Pointer[keySet] // nil until the first successful read
	// lastErr is the error of the last read (nil after a successful one);
	// atomic so that /readyz never waits for a read in flight.
	lastErr atomic.Pointer[error]

	// unknownKid joins the callers that meet an unknown kid while a read
	// for one is in flight.
	unknownKid singleflight.Group

	mu          sync.Mutex // serializes reads; guards the fields below
	lastAttempt time.Time
	lastSuccess time.Time
	lastKidRead time.Time // last read caused by an unknown kid
	lastSum     [sha256.Size]byte
}

// NewJWKSFile returns the key set in the file at path, not read yet (call
// Refresh). It returns an error when opts lacks its Client or clock.
func NewJWKSFile(path string, opts JWKSOptions) (*JWKS, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &JWKS{file: path, shown: path, opts: o}, nil
}

// NewJWKSURL returns the key set at rawURL (absolute http or https), not
// fetched yet (call Refresh, or let the first Key or KeyRing.Run do it). It
// returns an error for another URL or when opts lacks its Client or clock.
func NewJWKSURL(rawURL string, opts JWKSOptions) (*JWKS, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("policy: JWKS URL %s is not an absolute http or https URL", quoteURL(rawURL))
	}
	return &JWKS{url: rawURL, shown: u.Redacted(), opts: o}, nil
}

// Refresh reads the source now and, when it holds at least one usable
// signing key, makes it the cached set. Keys that cannot be used (symmetric,
// encryption-only, unknown types or algorithms, RSA under 2048 bits) are
// skipped and logged. On error the previous keys stay. ctx bounds the read
// together with FetchTimeout.
func (k *JWKS) Refresh(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.refreshLocked(ctx)
}

func (k *JWKS) refreshLocked(ctx context.Context) error {
	now := k.opts.Now()
	k.lastAttempt = now
	err := k.readLocked(ctx, now)
	k.lastErr.Store(&err)
	return err
}

func (k *JWKS) readLocked(ctx context.Context, now time.Time) error {
	data, err := k.read(ctx)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	if sum == k.lastSum && k.keys.Load() != nil {
		k.lastSuccess = now
		return nil
	}
	ks, skipped, err := parseJWKS(data)
	for _, s := range skipped {
		k.opts.Logger.Warn("JWKS: skipping a key that cannot verify tokens", "source", k.shown, "reason", s)
	}
	if err != nil {
		return fmt.Errorf("JWKS %s: %w", k.shown, err)
	}
	k.keys.Store(ks)
	k.lastSum, k.lastSuccess = sum, now
	k.opts.Logger.Info("JWKS loaded", "source", k.shown, "keys", len(ks.keys), "kids", ks.kids())
	return nil
}

// read returns the raw JWK Set document, at most maxJWKSBytes.
func (k *JWKS) read(ctx context.Context) ([]byte, error) {
	if k.file != "" {
		f, err := os.Open(k.file)
		if err != nil {
			return nil, fmt.Errorf("JWKS: %w", err)
		}
		defer f.Close()
		return readBounded(f, k.shown)
	}
	ctx, cancel := context.WithTimeout(ctx, k.opts.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, fmt.Errorf("JWKS %s: %w", k.shown, err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := k.opts.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("JWKS: fetching: %w", err) // url.Error names the (redacted) URL
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("JWKS %s: answered %s", k.shown, resp.Status)
	}
	return readBounded(resp.Body, k.shown)
}

func readBounded(r io.Reader, shown string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("JWKS %s: reading: %w", shown, err)
	}
	if len(data) > maxJWKSBytes {
		return nil, fmt.Errorf("JWKS %s: larger than %d bytes", shown, maxJWKSBytes)
	}
	return data, nil
}

// refreshIfDue reads the source when KeyRing.Run should: a file on every
// call (a local read is cheap, and this is how a changed file is seen), a
// URL once its keys are RefreshInterval old, or MinRefetchInterval after a
// failed fetch. Failures are logged.
func (k *JWKS) refreshIfDue(ctx context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.opts.Now()
	if k.url != "" {
		fresh := !k.lastSuccess.IsZero() && now.Sub(k.lastSuccess) < k.opts.RefreshInterval
		retryTooSoon := !k.lastAttempt.IsZero() && now.Sub(k.lastAttempt) < k.opts.MinRefetchInterval
		if fresh || retryTooSoon {
			return
		}
	}
	if err := k.refreshLocked(ctx); err != nil {
		k.logFailure("JWKS refresh failed", err)
	}
}

// logFailure logs a failed read, saying what the key set serves meanwhile:
// the keys read before, or none (every token of its routes is refused).
// Called with k.mu held.
func (k *JWKS) logFailure(msg string, err error) {
	if k.keys.Load() != nil {
		k.opts.Logger.Warn(msg+"; keeping the keys read before", "source", k.shown, "err", err)
		return
	}
	k.opts.Logger.Warn(msg+"; no keys were read yet, so every token verified by this key set is refused", "source", k.shown, "err", err)
}

// loaded reports whether the set holds keys, and, when it does not, the
// error of its last read (nil when none was tried yet).
// It takes no lock, so it never waits for a read in flight.
func (k *JWKS) loaded() (bool, error) {
	if k.keys.Load() != nil {
		return true, nil
	}
	if err := k.lastErr.Load(); err != nil {
		return false, *err
	}
	return false, nil
}

// needsRead reports whether the set holds no keys yet, so KeyRing.Run
// should try again soon rather than after PollInterval.
func (k *JWKS) needsRead() bool { return k.keys.Load() == nil }

// errNoKey is why a token's key was not found; its text reaches the client.
var errNoKey = errors.New("no signing key in the issuer's key set matches the token's kid and alg")

// Key returns the public key for a token whose header has kid and alg (a
// value of JWTAlgorithms): the key with that "kid" whose type fits alg (an
// RSA key of 2048 bits or more for RS*/PS*, the matching curve for ES*, an
// Ed25519 key for EdDSA) and whose own "alg", if any, is alg. A token
// without a kid gets the only key that fits, if exactly one does.
//
// When no key has that kid, the source is read again at once, unless a read
// caused by an unknown kid happened less than MinRefetchInterval ago or the
// last read failed less than MinRefetchInterval ago; concurrent callers
// share one read in flight. A read by KeyRing.Run does not count against
// the limit, so a key published just after a periodic read still works on
// its first use. The read runs without ctx's cancellation, so one leaving
// client does not fail the others waiting on it (FetchTimeout applies);
// a caller whose ctx ends stops waiting and gets an error.
func (k *JWKS) Key(ctx context.Context, kid, alg string) (crypto.PublicKey, error) {
	seen := k.keys.Load()
	if seen != nil {
		if key, err := seen.find(kid, alg); !errors.Is(err, errNoKey) {
			return key, err
		}
	}
	read := k.unknownKid.DoChan("", func() (any, error) {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.keys.Load() != seen {
			return nil, nil // another read finished since seen was loaded
		}
		now := k.opts.Now()
		if !k.lastKidRead.IsZero() && now.Sub(k.lastKidRead) < k.opts.MinRefetchInterval {
			return nil, nil
		}
		if failed := k.lastErr.Load(); failed != nil && *failed != nil && now.Sub(k.lastAttempt) < k.opts.MinRefetchInterval {
			return nil, nil
		}
		k.lastKidRead = now
		if err := k.refreshLocked(context.WithoutCancel(ctx)); err != nil {
			k.logFailure("JWKS read for an unknown kid failed", err)
		}
		return nil, nil
	})
	select {
	case <-read:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w (the request ended while the key set was read: %w)", errNoKey, ctx.Err())
	}
	return k.keys.Load().find(kid, alg)
}

// keySet is one parsed JWK Set, immutable once stored.
type keySet struct{ keys []jwk }

// jwk is one usable public signing key.
type jwk struct {
	kid, alg string
	key      crypto.PublicKey
}

func (ks *keySet) kids() []string {
	out := make([]string, len(ks.keys))
	for i, k := range ks.keys {
		out[i] = k.kid
	}
	return out
}

// find returns the key for kid and alg. It returns errNoKey when no key has
// kid (or, for kid "", when not exactly one key fits alg), and another error
// when keys with kid exist but none fits alg: rereading the source would
// not help then.
func (ks *keySet) find(kid, alg string) (crypto.PublicKey, error) {
	if ks == nil {
		return nil, errNoKey
	}
	var match crypto.PublicKey
	n, named := 0, false
	for _, k := range ks.keys {
		if kid != "" && k.kid != kid {
			continue
		}
		named = true
		if !k.fits(alg) {
			continue
		}
		if kid != "" {
			return k.key, nil
		}
		match = k.key
		n++
	}
	switch {
	case kid == "" && n == 1:
		return match, nil
	case kid == "" && n > 1:
		return nil, errors.New("the token names no kid and several keys in the issuer's key set fit its alg")
	case named && kid != "":
		return nil, fmt.Errorf("the key %q does not fit the token's alg %s", kid, alg)
	}
	return nil, errNoKey
}

// fits reports whether k may verify a signature made with alg.
func (k jwk) fits(alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch key := k.key.(type) {
	case *rsa.PublicKey:
		return (strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")) && key.N.BitLen() >= minRSABits
	case *ecdsa.PublicKey:
		switch alg {
		case "ES256":
			return key.Curve == elliptic.P256()
		case "ES384":
			return key.Curve == elliptic.P384()
		case "ES512":
			return key.Curve == elliptic.P521()
		}
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// parseJWKS parses a JWK Set document (RFC 7517 section 5) into its usable
// signing keys; skipped says why each other key was left out. It returns an
// error when data is no JWK Set or holds no usable key.
func parseJWKS(data []byte) (ks *keySet, skipped []string, err error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("not a JWK Set: %w", err)
	}
	if doc.Keys == nil {
		return nil, nil, errors.New(`not a JWK Set: no "keys" member`)
	}
	ks = &keySet{}
	for i, raw := range doc.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(raw); err != nil {
			skipped = append(skipped, fmt.Sprintf("key %d: %v", i, err))
			continue
		}
		name := fmt.Sprintf("key %d (kid %q)", i, k.KeyID)
		pub := k.Key
		if !k.IsPublic() {
			pub = k.Public().Key // a private key's public half; nil for a symmetric key
		}
		switch key := pub.(type) {
		case *rsa.PublicKey:
			if key.N.BitLen() < minRSABits {
				skipped = append(skipped, fmt.Sprintf("%s: RSA key of %d bits, under %d", name, key.N.BitLen(), minRSABits))
				continue
			}
		case *ecdsa.PublicKey, ed25519.PublicKey:
		default:
			skipped = append(skipped, name+": not an RSA, EC or Ed25519 public key (symmetric keys never verify tokens here)")
			continue
		}
		if k.Use != "" && k.Use != "sig" {
			skipped = append(skipped, fmt.Sprintf("%s: use %q, not sig", name, k.Use))
			continue
		}
		if k.Algorithm != "" && !slices.Contains(jwtAlgorithms, k.Algorithm) {
			skipped = append(skipped, fmt.Sprintf("%s: alg %q is not accepted", name, k.Algorithm))
			continue
		}
		ks.keys = append(ks.keys, jwk{kid: k.KeyID, alg: k.Algorithm, key: pub})
	}
	if len(ks.keys) == 0 {
		return nil, skipped, fmt.Errorf("no usable signing key among its %d keys", len(doc.Keys))
	}
	return ks, skipped, nil
}
