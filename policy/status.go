package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseStatus parses one replay_statuses or unknown_statuses entry: a
// class "1xx".."5xx" (also "2XX") or a code 100..599.
func ParseStatus(s string) (StatusRange, error) {
	s = strings.TrimSpace(s)
	if len(s) == 3 && (s[1:] == "xx" || s[1:] == "XX") && '1' <= s[0] && s[0] <= '5' {
		base := int(s[0]-'0') * 100
		return StatusRange{Min: base, Max: base + 99}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 599 {
		return StatusRange{}, fmt.Errorf("%q is neither a status class 1xx..5xx nor a code 100..599", s)
	}
	return StatusRange{Min: n, Max: n}, nil
}

// String returns "2xx" for a whole class, "409" for one code, else
// "200-204".
func (s StatusRange) String() string {
	switch {
	case s.Min == s.Max:
		return strconv.Itoa(s.Min)
	case s.Min%100 == 0 && s.Max == s.Min+99:
		return strconv.Itoa(s.Min/100) + "xx"
	}
	return strconv.Itoa(s.Min) + "-" + strconv.Itoa(s.Max)
}

// OutcomeUnknown reports whether a response with this status leaves the
// outcome unknown (unknown_statuses; Route.UnknownStatuses).
func (r *Route) OutcomeUnknown(status int) bool { return inRanges(r.UnknownStatuses, status) }

// Replayable reports whether a response with this status is stored and
// replayed (replay_statuses).
func (r *Route) Replayable(status int) bool { return inRanges(r.ReplayStatuses, status) }

// inRanges reports whether status is in one of rs.
func inRanges(rs []StatusRange, status int) bool {
	for _, s := range rs {
		if s.Min <= status && status <= s.Max {
			return true
		}
	}
	return false
}

// quotedStatuses is rs as a YAML flow list of quoted entries, as
// Describe writes them: ["2xx", "409"].
func quotedStatuses(rs []StatusRange) string {
	q := make([]string, len(rs))
	for i, s := range rs {
		q[i] = strconv.Quote(s.String())
	}
	return "[" + strings.Join(q, ", ") + "]"
}
