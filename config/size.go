package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes ParseSize accepts, in bytes: IEC binary units
// (KiB = 1024) and SI decimal ones (KB = 1000).
var sizeUnits = map[string]int64{
	"":    1,
	"B":   1,
	"KB":  1000,
	"MB":  1000 * 1000,
	"GB":  1000 * 1000 * 1000,
	"KIB": 1 << 10,
	"MIB": 1 << 20,
	"GIB": 1 << 30,
}

// ParseSize parses a byte size: a non-negative integer, optionally followed
// by a unit B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of
// 1024), case-insensitive, with optional spaces between: "512", "64KiB",
// "1MiB", "1 GiB", "10MB". It returns the size in bytes, or an error for
// any other text (fractions, negative numbers, unknown units) or a size
// that overflows int64.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && '0' <= t[i] && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%q is not a byte size like 512, 64KiB, 1MiB or 1GiB", s)
	}
	if i < len(t) && t[i] == '.' {
		return 0, fmt.Errorf("%q: fractions are not allowed in a byte size; use a smaller unit", s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is too large a byte size", s)
	}
	mul, ok := sizeUnits[strings.ToUpper(strings.TrimSpace(t[i:]))]
	if !ok {
		return 0, fmt.Errorf("%q has an unknown unit; use B, KB, MB, GB, KiB, MiB or GiB", s)
	}
	if n > math.MaxInt64/mul {
		return 0, fmt.Errorf("%q is too large a byte size", s)
	}
	return n * mul, nil
}
