package problem

// advice is what a client should do on each of the proxy's kinds: the
// "what the client should do" column of the problem table of
// docs/problems.md (TestAdviceMatchesREADME), which `idemgate policy` publishes.
var advice = map[string]string{
	InvalidKey.Slug:            "fix the key",
	MissingKey.Slug:            "send a key",
	MissingOwner.Slug:          "authenticate",
	InvalidCredentials.Slug:    "get a fresh token, retry with the same key",
	BadRequest.Slug:            "retry",
	Ambiguous.Slug:             "send the canonical form",
	TooLarge.Slug:              "send less",
	KeyReused.Slug:             "use a new key",
	InProgress.Slug:            "retry later with the same key",
	NotRetained.Slug:           "do not retry; the operation happened",
	OutcomeUnknown.Slug:        "ask an operator; do not retry",
	ResourceDeleted.Slug:       "do not retry; the operation happened and its resource was deleted since",
	StoreUnavailable.Slug:      "retry later with the same key",
	Overloaded.Slug:            "retry later with the same key",
	StoredResponseDamaged.Slug: "ask an operator; do not retry",
	OwnerSourceConflict.Slug:   "ask an operator; do not retry",
	ShuttingDown.Slug:          "retry with the same key (another replica answers)",
	UpstreamUnreachable.Slug:   "retry with the same key",
	UpstreamFailed.Slug:        "retry with the same key after the lease",
	UpstreamTimeout.Slug:       "retry with the same key after the lease",
	RequestTrailers.Slug:       "send those fields as header fields",
	HTTP2Preface.Slug:          "use HTTP/1.1, or HTTP/2 over TLS",
	AsteriskTarget.Slug:        "send a path",
}

// Advice returns what a client should do when it gets a problem of kind
// k, in a few words; "" for the admin listener's kinds, which no API
// client meets.
func (k Kind) Advice() string { return advice[k.Slug] }
