package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// encodeRecordV2 serializes r in format version 2 (docs/protocol.md,
// "Record value (version 2)"). Only tests write it now, to check that
// records of earlier builds keep replaying; a test file, since no build
// writes version 2 any more.
func encodeRecordV2(r *record) ([]byte, error) {
	var (
		header  []byte
		body    []byte
		trailer []byte
		status  int
		flags   byte
	)
	if r.takeover {
		flags |= flagTakeover
	}
	state := stateRunning
	switch {
	case r.gone:
		state = stateGone
	case !r.running:
		state = stateCompleted
		if r.resp == nil {
			return nil, errors.New("completed record without response")
		}
		if r.resp.Status < 0 || r.resp.Status > math.MaxUint16 {
			return nil, fmt.Errorf("response status %d out of range", r.resp.Status)
		}
		status = r.resp.Status
		if r.resp.Omitted {
			flags |= flagOmitted
		}
		if r.resp.Header != nil {
			flags |= flagHeaderSet
			var err error
			if header, err = encodeHeader(r.resp.Header); err != nil {
				return nil, err
			}
		}
		if r.resp.Body != nil {
			flags |= flagBodySet
			body = r.resp.Body
		}
		if len(r.resp.Trailer) > 0 {
			flags |= flagTrailerSet
			var err error
			if trailer, err = encodeHeader(r.resp.Trailer); err != nil {
				return nil, err
			}
		}
	}
	fields := [][]byte{[]byte(r.id.Owner), []byte(r.id.Scope), []byte(r.id.Key), []byte(r.fingerprint), []byte(r.token), header, body, []byte(r.recipe)}
	if flags&flagTrailerSet != 0 {
		fields = append(fields, trailer)
	}
	size := fixedLen
	for _, f := range fields {
		if uint64(len(f)) > math.MaxUint32 {
			return nil, fmt.Errorf("record field of %d bytes exceeds 4 GiB", len(f))
		}
		size += 4 + len(f)
	}
	b := make([]byte, 0, size)
	b = append(b, formatV2, state, flags)
	for _, v := range []int64{r.createdMs, r.leaseEndMs, r.expiryMs, r.retentionMs, r.storedAtMs} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	b = binary.BigEndian.AppendUint16(b, uint16(status))
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b, nil
}
