package identity

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/internal/httpsyntax"
)

// OwnerKind names where a request's owner comes from.
type OwnerKind string

// Owner sources.
const (
	OwnerHeader        OwnerKind = "header"        // header:NAME, a trusted header the auth layer sets
	OwnerAuthorization OwnerKind = "authorization" // SHA-256 of the Authorization header
	OwnerClientCert    OwnerKind = "client-cert"   // SHA-256 of the verified leaf certificate's names (CertOwner)
	OwnerJWT           OwnerKind = "jwt"           // claims of a verified JWT bearer token; needs Route.JWT
	OwnerNone          OwnerKind = "none"          // global keys; needs allow_global_keys
	// OwnerList is an owner made of several sources (`owner: [authorization,
	// "header:Stripe-Account"]`): one credential acting for many accounts
	// is a principal per account (ListOwner).
	OwnerList OwnerKind = "list"
)

// OwnerSource is a parsed `owner:` setting.
type OwnerSource struct {
	Kind   OwnerKind
	Header string // canonical header name, for OwnerHeader
	// Parts are the sources of an OwnerList, in the order written, at
	// least two, none of them none or a list, each kind at most once per
	// header name (ParseOwnerSources).
	Parts []OwnerSource
}

// Owner value prefixes. They keep the forms of different sources apart, so
// that a trusted header value can never equal a hash of a credential; the
// admin API builds owners with the same forms.
const (
	ownerHeaderPrefix  = "h:"
	ownerAuthPrefix    = "sha256:"
	ownerCertPrefix    = "cert:"
	ownerCertDERPrefix = "certder:"
	ownerJWTPrefix     = "j:"
)

// ParseOwnerSource parses an `owner:` setting: "header:NAME",
// "authorization", "jwt", "client-cert" or "none". NAME must be an RFC 9110 field
// name and is canonicalized; Authorization, Proxy-Authorization and Cookie
// are refused as header owners because their raw credential would become the
// stored owner (use "authorization" instead, which stores only a hash).
func ParseOwnerSource(s string) (OwnerSource, error) {
	switch OwnerKind(s) {
	case OwnerAuthorization, OwnerJWT, OwnerClientCert, OwnerNone:
		return OwnerSource{Kind: OwnerKind(s)}, nil
	}
	name, ok := strings.CutPrefix(s, string(OwnerHeader)+":")
	if !ok {
		return OwnerSource{}, fmt.Errorf("unknown owner source %q; want header:NAME, authorization, jwt, client-cert or none", s)
	}
	if !httpsyntax.IsToken(name) {
		return OwnerSource{}, fmt.Errorf("owner header %q is not a valid field name", name)
	}
	name = textproto.CanonicalMIMEHeaderKey(name)
	switch name {
	case "Authorization", "Proxy-Authorization", "Cookie":
		return OwnerSource{}, fmt.Errorf("owner header %s carries a raw credential; use owner: jwt or owner: authorization", name)
	}
	return OwnerSource{Kind: OwnerHeader, Header: name}, nil
}

// String returns the setting as written in the config: "header:NAME",
// "authorization", "jwt", "client-cert" or "none", and for an OwnerList
// its sources as a YAML flow list ("[authorization, header:Stripe-Account]").
func (o OwnerSource) String() string {
	if o.Kind == OwnerList {
		return o.listString()
	}
	if o.Kind == OwnerHeader {
		return string(OwnerHeader) + ":" + o.Header
	}
	return string(o.Kind)
}

// AuthorizationOwner returns the owner of a request whose Authorization
// field value is value: "sha256:" + lowercase hex SHA-256 of the value bytes,
// so that the raw credential is never stored.
func AuthorizationOwner(value string) string {
	sum := sha256.Sum256([]byte(value))
	return ownerAuthPrefix + hex.EncodeToString(sum[:])
}

// HeaderOwner returns the owner of a request whose trusted owner header has
// value: "h:" + value with surrounding spaces and tabs trimmed.
func HeaderOwner(value string) string {
	return ownerHeaderPrefix + strings.Trim(value, " \t")
}

// CertOwner returns the owner of a request whose verified leaf certificate
// is cert: "cert:" + lowercase hex SHA-256 of the identity the issuer
// vouches for, its issuer and subject names and every subject alternative
// name the CA wrote (RFC 5280 section 4.2.1.6), every part length-prefixed
// and the names sorted. DNS, email, IP and URI names enter as the standard
// library decodes them ("dns:NAME", ...), exactly as before, so the owner
// of a certificate with only those names, and the records stored under it,
// did not change; every other kind (otherName such as a Windows UPN,
// x400Address, directoryName, ediPartyName, registeredID), which the
// standard library does not decode, enters as "sanN:" + the hex of its
// whole DER encoding (N the GeneralName tag). Two certificates of one CA
// with one subject that differ only in such a name (smart cards and Active
// Directory Certificate Services issue UPNs) are two owners
// (TestCertOwnerCountsEveryAltName; before, they were one, and one
// principal's stored response replayed to the other). Sorting keeps the
// owner independent of the order the CA lists its names in. A
// renewed certificate (new key, serial and validity, same names from the
// same CA, as cert-manager issues it) is the same owner, so a retry across
// a renewal replays instead of running again (adversarial finding F2 of
// the second round: the hash of the DER made it a new owner). A
// certificate with neither a subject nor any alternative name names nobody:
// its owner is the hash of its DER bytes, under "certder:".
func CertOwner(cert *x509.Certificate) string {
	var sans []string
	sans = append(sans, prefixed("dns:", cert.DNSNames)...)
	sans = append(sans, prefixed("email:", cert.EmailAddresses)...)
	for _, ip := range cert.IPAddresses {
		sans = append(sans, "ip:"+ip.String())
	}
	for _, u := range cert.URIs {
		sans = append(sans, "uri:"+u.String())
	}
	if len(cert.Subject.Names) == 0 && len(sans) == 0 {
		// Decided on the names decoded before otherName and its kin
		// counted, so such a certificate keeps the owner it had.
		sum := sha256.Sum256(cert.Raw)
		return ownerCertDERPrefix + hex.EncodeToString(sum[:])
	}
	sans = append(sans, undecodedAltNames(cert)...)
	slices.Sort(sans)
	h := sha256.New()
	for _, part := range append([]string{string(cert.RawIssuer), string(cert.RawSubject)}, sans...) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	return ownerCertPrefix + hex.EncodeToString(h.Sum(nil))
}

// oidSubjectAltName is id-ce-subjectAltName (RFC 5280 section 4.2.1.6).
var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// undecodedAltNames returns "sanN:" + hex DER for every GeneralName of
// cert's subjectAltName extension whose kind the standard library does not
// decode into DNSNames, EmailAddresses, IPAddresses or URIs (tags 1, 2, 6
// and 7). x509.ParseCertificate has already checked the extension's syntax;
// a name that does not parse here enters as the whole extension, so nothing
// the CA wrote is ever dropped.
func undecodedAltNames(cert *x509.Certificate) []string {
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		var seq asn1.RawValue
		rest, err := asn1.Unmarshal(ext.Value, &seq)
		if err != nil || len(rest) > 0 || !seq.IsCompound || seq.Tag != asn1.TagSequence {
			return []string{"san:" + hex.EncodeToString(ext.Value)}
		}
		var out []string
		for names := seq.Bytes; len(names) > 0; {
			var name asn1.RawValue
			names, err = asn1.Unmarshal(names, &name)
			if err != nil {
				return []string{"san:" + hex.EncodeToString(ext.Value)}
			}
			switch name.Tag {
			case 1, 2, 6, 7: // rfc822Name, dNSName, uniformResourceIdentifier, iPAddress
				if name.Class == asn1.ClassContextSpecific {
					continue
				}
			}
			out = append(out, "san"+strconv.Itoa(name.Tag)+":"+hex.EncodeToString(name.FullBytes))
		}
		return out
	}
	return nil
}

func prefixed(prefix string, vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = prefix + v
	}
	return out
}

// Of returns the owner value of req per o: the trusted header's
// value, "sha256:"+hex of the Authorization header, "j:"+the claims of a
// verified JWT, CertOwner of the verified leaf certificate, or ""
// for none. It returns ErrOwnerMissing when the source yields no value, and
// ErrInvalidCredentials (wrapped) when owner: jwt finds no acceptable bearer
// token (see JWTVerifier.Owner).
//
// Exact forms: "h:"+value (trimmed) for header:NAME, AuthorizationOwner for
// authorization, JWTOwner of the configured claims for jwt, CertOwner of
// req.TLS.VerifiedChains[0][0] for client-cert (an unverified peer
// certificate is no owner). A source field sent more than once is ambiguous
// and also yields ErrOwnerMissing (wrapped), or ErrInvalidCredentials for
// jwt, never a pick of one value.
//
// v verifies the bearer tokens of a jwt source (the route's, bound by
// KeyRing.Bind); nil refuses every token.
func (o OwnerSource) Of(req *http.Request, v *JWTVerifier) (string, error) {
	if o.Kind == OwnerList {
		return o.listOwner(req, v)
	}
	return o.single(req, v)
}

// single is Of for one source: the route's own, or a part of its owner
// list.
func (src OwnerSource) single(req *http.Request, v *JWTVerifier) (string, error) {
	switch src.Kind {
	case OwnerNone:
		return "", nil
	case OwnerHeader:
		v, err := singleValue(req.Header, src.Header)
		if err != nil {
			return "", err
		}
		if strings.Trim(v, " \t") == "" {
			return "", fmt.Errorf("%w: header %s is absent or empty", ErrOwnerMissing, src.Header)
		}
		return HeaderOwner(v), nil
	case OwnerAuthorization:
		v, err := singleValue(req.Header, "Authorization")
		if err != nil {
			return "", err
		}
		if strings.Trim(v, " \t") == "" {
			return "", fmt.Errorf("%w: no Authorization header", ErrOwnerMissing)
		}
		return AuthorizationOwner(v), nil
	case OwnerJWT:
		return bearerOwner(req, v)
	case OwnerClientCert:
		if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
			return "", fmt.Errorf("%w: no verified client certificate", ErrOwnerMissing)
		}
		return CertOwner(req.TLS.VerifiedChains[0][0]), nil
	}
	return "", fmt.Errorf("%w: %q is no valid owner source", ErrOwnerMissing, src.Kind)
}

func singleValue(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", fmt.Errorf("%w: header %s sent %d times", ErrOwnerMissing, name, len(vs))
}
