//go:build race

package storetest

// raceDetector reports whether the race detector is built in: under it a
// size measurement writes fewer records by default (SizeRecords), since
// 100,000 claims and completes through it take minutes.
const raceDetector = true
