package identity

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWTLeeway is the clock skew tolerated when owner: jwt checks a token's
// "exp" and "nbf" claims (RFC 7519 sections 4.1.4 and 4.1.5): a token is
// accepted until 30 s after its expiry and from 30 s before its start.
const JWTLeeway = 30 * time.Second

// maxBearerTokenBytes bounds the bearer token owner: jwt parses, in bytes;
// a longer one is refused without being decoded.
const maxBearerTokenBytes = 16 << 10

// jwtAlgorithms are the JWS "alg" values (RFC 7518 section 3.1, RFC 8037
// section 3.1) owner: jwt accepts: asymmetric signatures only, so "none"
// and the HMAC algorithms, whose "key" would be the public key, never
// verify a token.
var jwtAlgorithms = []string{
	"RS256", "RS384", "RS512",
	"PS256", "PS384", "PS512",
	"ES256", "ES384", "ES512",
	"EdDSA",
}

// JWTAlgorithms returns the JWS "alg" values owner: jwt accepts: RS256,
// RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512 and EdDSA. The
// slice is a copy.
func JWTAlgorithms() []string { return slices.Clone(jwtAlgorithms) }

// DefaultJWTClaims returns the claims an owner: jwt owner is built from when
// the `jwt:` section lists none: "iss" and "sub" (RFC 7519 sections 4.1.1
// and 4.1.2), the pair that names one principal across token refreshes.
func DefaultJWTClaims() []string { return []string{"iss", "sub"} }

// JWTSettings is a parsed `jwt:` section, the settings of owner: jwt: where
// the signing keys are, which issuers and audiences are accepted and which
// claims make the owner.
type JWTSettings struct {
	// JWKSFile is a local file holding a JWK Set (RFC 7517 section 5). It is
	// read when the policy is bound (KeyRing.Bind, so at start and on every
	// config reload) and checked again periodically. Exactly one of JWKSFile
	// and JWKSURL is set.
	JWKSFile string
	// JWKSURL is the absolute http(s) URL of a JWK Set, e.g. an issuer's
	// jwks_uri (RFC 8414 section 2), fetched and cached by KeyRing.
	JWKSURL string
	// Issuers are the accepted "iss" values, compared as exact strings; at
	// least one.
	Issuers []string
	// Audiences, when not empty, are the accepted "aud" values: a token must
	// name at least one of them (RFC 7519 section 4.1.3). Empty means the
	// audience is not checked.
	Audiences []string
	// Claims are the claim names whose values, in this order, make the
	// owner (see JWTOwner); at least one. Default DefaultJWTClaims.
	Claims []string
}

// Source returns the JWK Set location: "file:"+JWKSFile or "url:"+JWKSURL.
// Routes with the same Source share one cached key set.
func (s *JWTSettings) Source() string {
	if s.JWKSURL != "" {
		return "url:" + s.JWKSURL
	}
	return "file:" + s.JWKSFile
}

// Clone returns a copy of s that shares no slice with it; nil for nil.
func (s *JWTSettings) Clone() *JWTSettings {
	if s == nil {
		return nil
	}
	c := *s
	c.Issuers = slices.Clone(s.Issuers)
	c.Audiences = slices.Clone(s.Audiences)
	c.Claims = slices.Clone(s.Claims)
	return &c
}

// Check reports each problem of s to bad, with the key below the `jwt:`
// section it is about ("" for the section itself, ".jwks_url",
// ".issuers", ".audiences", ".claims").
func (s *JWTSettings) Check(bad func(key, format string, args ...any)) {
	switch {
	case s.JWKSFile != "" && s.JWKSURL != "":
		bad("", "set either jwks_file or jwks_url, not both")
	case s.JWKSFile == "" && s.JWKSURL == "":
		bad("", "needs jwks_file or jwks_url, where the issuer's signing keys (a JWK Set) are")
	case s.JWKSURL != "":
		u, err := url.Parse(s.JWKSURL)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https"):
			bad(".jwks_url", "%s must be an absolute http or https URL", quoteURL(s.JWKSURL))
		case u.Host == "":
			bad(".jwks_url", "%s has no host", quoteURL(s.JWKSURL))
		case u.Fragment != "":
			bad(".jwks_url", "%s must not carry a fragment", quoteURL(s.JWKSURL))
		}
	}
	if len(s.Issuers) == 0 {
		bad(".issuers", "must list at least one accepted issuer (the tokens' iss claim)")
	}
	for _, iss := range s.Issuers {
		if strings.TrimSpace(iss) == "" {
			bad(".issuers", "must not contain an empty issuer")
		}
	}
	for _, aud := range s.Audiences {
		if strings.TrimSpace(aud) == "" {
			bad(".audiences", "must not contain an empty audience")
		}
	}
	if len(s.Claims) == 0 {
		bad(".claims", "must list at least one claim; the owner is built from their values (default [iss, sub])")
	}
	var seen []string
	for _, c := range s.Claims {
		switch {
		case strings.TrimSpace(c) == "":
			bad(".claims", "must not contain an empty claim name")
		case slices.Contains(seen, c):
			bad(".claims", "%q is listed twice", c)
		default:
			seen = append(seen, c)
		}
	}
}

// quoteURL quotes u for an error message, unless it may carry a credential.
func quoteURL(u string) string {
	if strings.Contains(u, "@") {
		return "the URL"
	}
	return fmt.Sprintf("%q", u)
}

// JWTOwner returns the owner of a request whose verified token has the
// claim values values, in the order of JWTSettings.Claims: "j:" + the values
// as one JSON array (RFC 8259), e.g. `j:["https://issuer.example","alice"]`.
// JSON keeps the form unambiguous: a value containing `","` is escaped, and
// the string "1" and the number 1 differ. Each value must be a string
// (non-empty), a json.Number (kept as the token wrote it) or a bool; any
// other value returns an error.
func JWTOwner(values []any) (string, error) {
	for i, v := range values {
		if err := checkOwnerValue(v); err != nil {
			return "", fmt.Errorf("value %d %w", i, err)
		}
	}
	var b bytes.Buffer
	b.WriteString(ownerJWTPrefix)
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(values); err != nil {
		return "", fmt.Errorf("encoding claim values: %w", err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// checkOwnerValue returns why v cannot be part of an owner, or nil.
func checkOwnerValue(v any) error {
	switch v := v.(type) {
	case string:
		if v == "" {
			return errors.New("is an empty string")
		}
	case json.Number, bool:
	case nil:
		return errors.New("is null")
	default:
		return fmt.Errorf("is a %T, not a string, number or boolean", v)
	}
	return nil
}

// JWTVerifier verifies JWT bearer tokens (RFC 7519, signed per RFC 7515)
// for one route's JWTSettings against a JWKS and turns an accepted token
// into an owner. It is safe for concurrent use.
type JWTVerifier struct {
	settings JWTSettings
	keys     *JWKS
	parser   *jwt.Parser
}

// NewJWTVerifier returns a verifier of tokens per s whose signing keys come
// from keys, with now as its clock for "exp" and "nbf" (JWTLeeway of skew
// allowed; "exp" is required). It returns an error when keys or now is nil
// or s has no issuer or claim.
func NewJWTVerifier(s JWTSettings, keys *JWKS, now func() time.Time) (*JWTVerifier, error) {
	if keys == nil || now == nil {
		return nil, errors.New("policy: NewJWTVerifier needs a key set and a clock")
	}
	if len(s.Issuers) == 0 || len(s.Claims) == 0 {
		return nil, errors.New("policy: NewJWTVerifier needs at least one issuer and one claim")
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(jwtAlgorithms),
		jwt.WithLeeway(JWTLeeway),
		jwt.WithTimeFunc(now),
		jwt.WithExpirationRequired(),
		jwt.WithJSONNumber(),
		jwt.WithStrictDecoding(),
	}
	if len(s.Audiences) > 0 {
		opts = append(opts, jwt.WithAudience(s.Audiences...))
	}
	return &JWTVerifier{settings: *s.Clone(), keys: keys, parser: jwt.NewParser(opts...)}, nil
}

// Owner verifies token (the compact JWS serialization, RFC 7515 section
// 7.1) and returns its owner, JWTOwner of the configured claims. The token
// must be signed with an allowed algorithm (see JWTAlgorithms) by a key of
// the JWKS whose "kid" it names (or its only compatible key when it names
// none), carry no "crit" header, not be expired or not yet valid, come from
// one of the issuers and, when audiences are set, be meant for one of them,
// and carry every configured claim as a non-empty string, a number or a
// boolean. Every failure returns an error wrapping ErrInvalidCredentials.
// An unknown "kid" may make the key set fetch its source once, rate limited
// (see JWKS.Key); ctx bounds that fetch.
func (v *JWTVerifier) Owner(ctx context.Context, token string) (string, error) {
	if len(token) > maxBearerTokenBytes {
		return "", fmt.Errorf("%w: the bearer token is longer than %d bytes", ErrInvalidCredentials, maxBearerTokenBytes)
	}
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		if _, ok := t.Header["crit"]; ok {
			// RFC 7515 section 4.1.11: extensions we do not know must fail.
			return nil, errors.New("the token has critical header extensions (crit)")
		}
		kid := ""
		if raw, ok := t.Header["kid"]; ok {
			s, isString := raw.(string)
			if !isString {
				return nil, errors.New("the token's kid header is not a string")
			}
			kid = s
		}
		return v.keys.Key(ctx, kid, t.Method.Alg())
	})
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidCredentials, err)
	}
	iss, err := claims.GetIssuer()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidCredentials, err)
	}
	if !slices.Contains(v.settings.Issuers, iss) {
		return "", fmt.Errorf("%w: the token's issuer is not accepted", ErrInvalidCredentials)
	}
	values := make([]any, len(v.settings.Claims))
	for i, name := range v.settings.Claims {
		val, ok := claims[name]
		if !ok {
			return "", fmt.Errorf("%w: the token has no %q claim", ErrInvalidCredentials, name)
		}
		if err := checkOwnerValue(val); err != nil {
			return "", fmt.Errorf("%w: the token's %q claim cannot name an owner: it %w", ErrInvalidCredentials, name, err)
		}
		values[i] = val
	}
	owner, err := JWTOwner(values)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidCredentials, err)
	}
	return owner, nil
}

// bearerOwner returns the owner of req for owner: jwt, verified by v: the verified token of
// its single "Authorization: Bearer" field (RFC 6750 section 2.1; the
// scheme is case-insensitive).
func bearerOwner(req *http.Request, v *JWTVerifier) (string, error) {
	vs := req.Header.Values("Authorization")
	switch {
	case len(vs) == 0 || strings.Trim(vs[0], " \t") == "":
		return "", fmt.Errorf("%w: no Authorization header with a Bearer token", ErrInvalidCredentials)
	case len(vs) > 1:
		return "", fmt.Errorf("%w: the Authorization header is sent %d times", ErrInvalidCredentials, len(vs))
	}
	scheme, token, _ := strings.Cut(strings.Trim(vs[0], " \t"), " ")
	token = strings.Trim(token, " \t")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", fmt.Errorf("%w: the Authorization header does not carry a Bearer token", ErrInvalidCredentials)
	}
	if v == nil {
		return "", fmt.Errorf("%w: no key set is bound for owner: jwt", ErrInvalidCredentials)
	}
	return v.Owner(req.Context(), token)
}
