package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/idemgate/idemgate/store/internal/layout"
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
	if r.Takeover {
		flags |= flagTakeover
	}
	state := stateRunning
	switch {
	case r.Gone:
		state = stateGone
	case !r.Running:
		state = stateCompleted
		if r.Resp == nil {
			return nil, errors.New("completed record without response")
		}
		if r.Resp.Status < 0 || r.Resp.Status > math.MaxUint16 {
			return nil, fmt.Errorf("response status %d out of range", r.Resp.Status)
		}
		status = r.Resp.Status
		if r.Resp.Omitted {
			flags |= flagOmitted
		}
		if r.Resp.Header != nil {
			flags |= flagHeaderSet
			header = layout.BoltV2Header.Encode(r.Resp.Header)
		}
		if r.Resp.Body != nil {
			flags |= flagBodySet
			body = r.Resp.Body
		}
		if len(r.Resp.Trailer) > 0 {
			flags |= flagTrailerSet
			trailer = layout.BoltV2Header.Encode(r.Resp.Trailer)
		}
	}
	fields := [][]byte{[]byte(r.ID.Owner), []byte(r.ID.Scope), []byte(r.ID.Key), []byte(r.Fingerprint), []byte(r.Token), header, body, []byte(r.Recipe)}
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
	for _, v := range []int64{r.CreatedMs, r.LeaseEndMs, r.ExpiryMs, r.RetentionMs, r.StoredAtMs} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	b = binary.BigEndian.AppendUint16(b, uint16(status))
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b, nil
}
