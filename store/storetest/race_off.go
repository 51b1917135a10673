//go:build !race

package storetest

// raceDetector reports whether the race detector is built in (see
// race_on.go).
const raceDetector = false
