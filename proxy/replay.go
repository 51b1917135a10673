package proxy

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/store"
)

// replay writes a completed record's response as stored, plus the replay
// marker; the upstream is not touched. resp is retained (replayOf answers
// the other cases).
//
// A replayed 2xx of a tombstoning request (an enforced DELETE retried)
// tombstones again, repairing a crash between its first 2xx and the
// tombstoning; a replayed create is indexed again, covering a response
// recorded in the background. Both are idempotent.
func (p *Proxy) replay(w http.ResponseWriter, r *http.Request, ex *exchange, resp *store.Response) {
	p.tombstone(r.Context(), ex, resp.Status)
	p.index(r, ex, resp)
	p.writeStored(w, r, ex, resp, true)
	ex.outcome, ex.status = metrics.OutcomeReplayed, resp.Status
}

// writeStored writes a stored response: its headers as stored, the replay
// marker when replayed, Content-Length from the body, and the body unless
// the request is HEAD. A response with trailers is sent without
// Content-Length, announcing them in a Trailer field, so HTTP/1.1 frames it
// chunked and the trailers follow the body (HTTP/2 sends them as a final
// HEADERS frame). The original answer and every replay go through it, so
// they differ only by the marker, and by the content coding when the
// request does not accept the stored one (fitCoding).
func (p *Proxy) writeStored(w http.ResponseWriter, r *http.Request, ex *exchange, resp *store.Response, replayed bool) {
	fitted, err := fitCoding(r, resp, ex.route.MaxResponseBytes)
	if err != nil {
		// Written as stored: the client may still know the coding, and
		// no other body would be the operation's answer.
		p.log.Warn("stored response not decoded for a client that does not accept its content coding",
			"route", ex.route.Name, "key_hash", keyHash(ex.id), "content_encoding", resp.Header.Get("Content-Encoding"),
			"unknown_coding", errors.Is(err, errUnknownCoding), "too_large", errors.Is(err, errDecodedTooLarge), "err", err)
	}
	resp = fitted
	h := w.Header()
	// spare holds value slots of h's own for the fields set below.
	var spare []string
	if replayed {
		spare = setOne(h, ReplayedHeader, "true", ownValues(h, resp.Header, 2, ex.replayValues[:]))
	} else {
		for name, values := range resp.Header {
			// The first answer's values are this request's own: filtered
			// from the upstream's answer, and the record already encoded
			// by the store, or cloned for a completion retried in the
			// background (completeLater).
			h[name] = values
		}
	}
	if route := ex.route; route.AdvertiseExpiry && route.Retention > 0 {
		// The record ends at its completion time plus the retention (a
		// retention of 0 keeps it forever: no field). A replay knows the
		// store's completion time; the first answer takes the moment it
		// started recording, which is no later. Truncated to the second,
		// the date is never after the record's end, so a client that
		// retries before it is answered from the record.
		from := resp.StoredAt
		if !replayed || from.IsZero() {
			from = ex.completing
		}
		if !from.IsZero() {
			h.Set(ExpiresHeader, from.Add(route.Retention).UTC().Format(http.TimeFormat))
		}
	}
	trailers := len(resp.Trailer) > 0 && r.Method != http.MethodHead
	if trailers {
		announceTrailers(h, resp.Trailer)
	} else {
		setOne(h, "Content-Length", strconv.Itoa(len(resp.Body)), spare)
	}
	w.WriteHeader(resp.Status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
	if trailers {
		sendTrailers(h, resp.Trailer)
	}
}

// ownValues sets each field of stored in h with value slices of h's own,
// cut from one array: buf when it is long enough (the exchange's own
// storage, no allocation), else one allocated, whatever the number of
// fields. A
// replayed response is shared: the replay cache hands every replay the
// record it decoded once, and the waiters of one call are answered from
// the record their wait read. A writer on the way may edit the values it
// is handed in place (Caddy's `header >Set-Cookie "^(.*)$" "$1; Secure"`
// does), and with stored's slices it rewrote the shared record on every
// replay ("sid=1; Secure; Secure; …") and raced with concurrent replays
// (TestConcurrentMutatingReplays, TestConcurrentMutatingReplaysThroughProxy).
// The strings themselves are immutable and stay shared. Each slice's
// capacity is its length, so an append to one never writes into the next.
// The array has extra more slots, returned for the fields writeStored sets
// itself (setOne): the replay marker and Content-Length, whose slices
// h.Set would allocate apart, so a replay costs no more allocations than
// when it shared the stored slices.
func ownValues(h, stored http.Header, extra int, buf []string) (spare []string) {
	n := extra
	for _, values := range stored {
		n += len(values)
	}
	own := buf
	if n > len(buf) {
		own = make([]string, n)
	}
	own = own[:n:n]
	for name, values := range stored {
		vs := own[:len(values):len(values)]
		copy(vs, values)
		own = own[len(values):]
		h[name] = vs
	}
	return own
}

// setOne sets the field name (in canonical form) of h to the one value v,
// in the first slot of spare (ownValues) when there is one, else in a
// slice of its own as h.Set does; it returns the slots left.
func setOne(h http.Header, name, v string, spare []string) []string {
	if len(spare) == 0 {
		h[name] = []string{v}
		return nil
	}
	spare[0] = v
	h[name] = spare[:1:1]
	return spare[1:]
}

// announceTrailers lists the names of trailer in h's Trailer field (RFC
// 9110 section 6.6.2), before the header is written: a client may need to
// know them, and it keeps net/http from giving the response a
// Content-Length, which would leave no place for trailers.
func announceTrailers(h http.Header, trailer http.Header) {
	names := make([]string, 0, len(trailer))
	for name := range trailer {
		names = append(names, name)
	}
	slices.Sort(names)
	h.Set("Trailer", strings.Join(names, ", "))
}

// sendTrailers sets trailer's fields after the body has been written, under
// http.TrailerPrefix so that each name goes out exactly as stored (a name
// announced in Trailer is looked up in canonical form only).
func sendTrailers(h http.Header, trailer http.Header) {
	for name, values := range trailer {
		h[http.TrailerPrefix+name] = append([]string(nil), values...)
	}
}

// StoredTrailer returns the trailer fields of t that a replay repeats, as
// StoredHeader does for the header, without names announced but never sent;
// nil when none is left.
func StoredTrailer(t http.Header) http.Header {
	out := StoredHeader(t)
	for name, values := range out {
		if len(values) == 0 {
			delete(out, name)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
