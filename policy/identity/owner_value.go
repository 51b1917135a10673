package identity

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// FromValue derives the stored owner of o from raw, the value an
// operator knows (the admin API's owner_value): for header:NAME the field's
// value (h:VALUE); for authorization the whole Authorization value, e.g.
// "Bearer abc" (sha256:HEX); for client-cert the client's certificate in
// PEM (CertOwner: cert:HEX of its names); for jwt the JSON array of the configured
// claims' values, e.g. ["https://issuer.example","alice"] (j:[...]); for
// none the empty value; for an owner list the JSON array of those raw
// values, one per source in the list's order (["Bearer abc","acct_1"]).
// claims are the route's jwt claims (JWTSettings.Claims, default
// DefaultJWTClaims). It derives exactly as Of does for a request, so the
// result finds the record.
func (o OwnerSource) FromValue(raw string, claims []string) (string, error) {
	switch o.Kind {
	case OwnerList:
		return o.listFromValue(raw, claims)
	case OwnerNone:
		if raw != "" {
			return "", errors.New("the route's owner is none: owner_value must be empty")
		}
		return "", nil
	case OwnerHeader:
		if strings.Trim(raw, " \t") == "" {
			return "", fmt.Errorf("owner_value is empty; give the value of the %s field", o.Header)
		}
		return HeaderOwner(raw), nil
	case OwnerAuthorization:
		if strings.Trim(raw, " \t") == "" {
			return "", errors.New("owner_value is empty; give the whole Authorization value, e.g. \"Bearer abc\"")
		}
		return AuthorizationOwner(raw), nil
	case OwnerClientCert:
		block, _ := pem.Decode([]byte(raw))
		if block == nil || block.Type != "CERTIFICATE" {
			return "", errors.New("owner_value must be the client certificate in PEM (-----BEGIN CERTIFICATE-----)")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return "", fmt.Errorf("owner_value: the client certificate does not parse: %w", err)
		}
		return CertOwner(cert), nil
	case OwnerJWT:
		dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
		dec.UseNumber() // as the verifier reads claims: 1 stays "1" in the owner
		var values []any
		if err := dec.Decode(&values); err != nil {
			return "", fmt.Errorf("owner_value must be the JSON array of the claims %v, e.g. [\"https://issuer.example\",\"alice\"]: %w", claims, err)
		}
		if n := len(claims); len(values) != n {
			return "", fmt.Errorf("owner_value has %d values, the route's claims %v are %d", len(values), claims, n)
		}
		return JWTOwner(values)
	}
	return "", fmt.Errorf("%q is no valid owner source", o.Kind)
}

// StoredForm describes the stored owner of o, for errors that must tell
// an operator what to send: e.g. "h:VALUE (the X-User field's value)".
// claims are as FromValue takes them.
func (o OwnerSource) StoredForm(claims []string) string {
	switch o.Kind {
	case OwnerHeader:
		return "h:VALUE (VALUE: the " + o.Header + " field)"
	case OwnerAuthorization:
		return "sha256:HEX (SHA-256 of the whole Authorization value)"
	case OwnerClientCert:
		return "cert:HEX (SHA-256 of the client certificate's issuer, subject and every alternative name)"
	case OwnerJWT:
		return fmt.Sprintf("j:[...] (the JSON array of the claims %v)", claims)
	case OwnerList:
		forms := make([]string, len(o.Parts))
		for i, src := range o.Parts {
			forms[i] = src.StoredForm(claims)
		}
		return "m:[...] (the JSON array of the owners of the sources " + o.String() + ": " + strings.Join(forms, "; ") + ")"
	}
	return "the empty owner"
}

// HasStoredForm reports whether owner has the prefix of o's stored form,
// so that a value given in another form (owner=carol on a header:X-User
// route) is refused with a hint instead of answering "not found".
func (o OwnerSource) HasStoredForm(owner string) bool {
	switch o.Kind {
	case OwnerHeader:
		return strings.HasPrefix(owner, ownerHeaderPrefix)
	case OwnerAuthorization:
		return strings.HasPrefix(owner, ownerAuthPrefix)
	case OwnerClientCert:
		return strings.HasPrefix(owner, ownerCertPrefix)
	case OwnerJWT:
		return strings.HasPrefix(owner, ownerJWTPrefix)
	case OwnerList:
		return strings.HasPrefix(owner, ownerListPrefix)
	}
	return owner == ""
}
