package main

import (
	"context"
	"os"
)

// row is one measured phase of one target (all its rounds together).
type row struct {
	target         *target
	workload, mode string
	rate           int
	s              *phaseStats
	cpuSec         float64 // target process CPU seconds
	peakRSSKB      int64
	storeOps       int64 // Valkey commands (scripts' inner ones included) or PostgreSQL statements
	storeTrips     int64 // commands or statements the client sent (round trips)
	storeCPUSec    float64
	loadCPUSec     float64 // the benchmark's own CPU (load generator)
	hostBusy0      int64   // jiffies of the whole machine not idle
	hostTotal0     int64   // all jiffies of the whole machine
}

// hostBusy returns the fraction of the machine's CPU time that was busy
// (any process, including work outside the benchmark) during the row.
func (r *row) hostBusy() float64 {
	if r.hostTotal0 == 0 {
		return 0
	}
	return float64(r.hostBusy0) / float64(r.hostTotal0)
}

func (r *row) merge(o *row) {
	r.s.merge(o.s)
	r.cpuSec += o.cpuSec
	r.peakRSSKB = max(r.peakRSSKB, o.peakRSSKB)
	r.storeOps += o.storeOps
	r.storeTrips += o.storeTrips
	r.storeCPUSec += o.storeCPUSec
	r.loadCPUSec += o.loadCPUSec
	r.hostBusy0 += o.hostBusy0
	r.hostTotal0 += o.hostTotal0
}

// per1k returns v per 1,000 requests of the row.
func (r *row) per1k(v float64) float64 {
	if r.s.requests == 0 {
		return 0
	}
	return v * 1000 / float64(r.s.requests)
}

// perReq returns n per request of the row.
func (r *row) perReq(n int64) float64 {
	if r.s.requests == 0 {
		return 0
	}
	return float64(n) / float64(r.s.requests)
}

// measure runs phase and adds the server-side figures: CPU and peak RSS of
// the target process and, for a target with a store meter (D, E), the
// store's operations, round trips and CPU.
func measure(ctx context.Context, t *target, phase func() *phaseStats) (*row, error) {
	t.proc.resetPeak()
	cpu0, err := t.proc.cpu()
	if err != nil {
		return nil, err
	}
	var st0 storeSnap
	if t.meter != nil {
		if st0, err = t.meter.snap(); err != nil {
			return nil, err
		}
	}
	self0, _ := cpuSeconds(os.Getpid())
	busy0, total0, _ := hostJiffies()
	s := phase()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	busy1, total1, _ := hostJiffies()
	self1, _ := cpuSeconds(os.Getpid())
	cpu1, err := t.proc.cpu()
	if err != nil {
		return nil, err
	}
	r := &row{target: t, s: s, cpuSec: cpu1 - cpu0, loadCPUSec: self1 - self0, hostBusy0: busy1 - busy0, hostTotal0: total1 - total0}
	if r.peakRSSKB, err = t.proc.memKB("VmHWM"); err != nil {
		return nil, err
	}
	if t.meter != nil {
		st1, err := t.meter.snap()
		if err != nil {
			return nil, err
		}
		r.storeOps, r.storeTrips, r.storeCPUSec, _ = st1.delta(st0)
	}
	return r, nil
}
