package valkey

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/idemgate/idemgate/store"
)

// Acks asks the primary to confirm that a write reached its replicas
// before the write counts: WAIT Replicas Timeout (or WAITAOF 1 Replicas
// Timeout with AOFLocal), sent right after the script, in one pipeline on
// the same dedicated connection, because WAIT counts the acknowledgements
// of its own connection's writes only. The zero value is off.
type Acks struct {
	// Replicas is how many replicas must acknowledge each claim, extension
	// and completion; 0 asks none (acks off unless AOFLocal).
	Replicas int
	// AOFLocal also requires the write to be fsynced to the primary's
	// append-only file (WAITAOF 1 Replicas Timeout); WAITAOF then counts
	// only the replicas that fsynced it to their own AOF. Primary and
	// replicas must run with appendonly yes, else every write fails closed.
	AOFLocal bool
	// Timeout is the longest the primary waits for the acknowledgements;
	// at least 1 ms when acks are on. A write not acknowledged by then
	// fails with store.ErrNotAcknowledged.
	Timeout time.Duration
}

// On reports whether any acknowledgement is asked for.
func (a Acks) On() bool { return a.Replicas > 0 || a.AOFLocal }

// maxReplicaLag is the largest INFO replication "lag" (seconds since the
// replica's last REPLCONF ACK, which replicas send every second) at which
// Ping counts a replica as able to acknowledge. Generous, so that a busy
// host does not flap readiness; writes fail closed on their own anyway.
const maxReplicaLag = 5

// script is a Lua script sent by hand: EVALSHA sha, then EVAL src when the
// server answers NOSCRIPT.
type script struct {
	src, sha string
}

func newScript(src string) script {
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// ackedWrite is the outcome of one script and the WAIT (or WAITAOF) that
// followed it on the same connection.
type ackedWrite struct {
	res   valkey.ValkeyResult // the script's reply
	fence valkey.ValkeyResult // fenceCmd's reply, when one was sent
	ack   valkey.ValkeyResult // WAIT's (an integer) or WAITAOF's ([local, replicas]) reply
	took  time.Duration       // the round trip of both
}

// multiClient is what writeAcked needs of a client: the command builder
// and DoMulti (valkey.Client and valkey.DedicatedClient both have them).
type multiClient interface {
	B() valkey.Builder
	DoMulti(ctx context.Context, multi ...valkey.Completed) []valkey.ValkeyResult
}

// ackCmd builds the acknowledgement command of s.acks.
func (s *Store) ackCmd(c multiClient) valkey.Completed {
	timeout := s.acks.Timeout.Milliseconds()
	if s.acks.AOFLocal {
		return c.B().Waitaof().Numlocal(1).Numreplicas(int64(s.acks.Replicas)).Timeout(timeout).Build()
	}
	return c.B().Wait().Numreplicas(int64(s.acks.Replicas)).Timeout(timeout).Build()
}

// writeAcked runs sc on the record key (s.Key of its identity) with args, followed by the
// acknowledgement command, in ONE pipeline on ONE dedicated connection. WAIT
// counts the replicas that have acknowledged the replication offset of its
// own connection's last write: sent on any other connection it answers at
// once with the replicas that acknowledged that connection's (older, or no)
// writes, which proves nothing about this one. On a Cluster client the pair
// goes through a Dedicated client: the client's own DoMulti would redirect
// the script alone after a MOVED while WAIT stays on the old node, so the
// pair would be split; on a dedicated connection a redirect surfaces as the
// script's error instead. After NOSCRIPT (the server lost its
// script cache: a restart, a failover to a replica that never ran the
// script, SCRIPT FLUSH) the pair is sent again with EVAL; the first WAIT
// then followed a failed script and is ignored.
//
// The returned error wraps store.ErrUnavailable when the pair could not be
// sent or the script failed; whether the acknowledgement came in time is
// for the caller to check with acked, since only a script that wrote needs
// one.
//
// With fence, fenceCmd goes between the script and the acknowledgement, so
// that the acknowledgement also covers whatever the script read (see
// fenceCmd); the caller checks it with acked where the script's answer
// hands out what it read.
func (s *Store) writeAcked(ctx context.Context, op string, sc script, key string, args []string, fence bool) (ackedWrite, error) {
	if err := ctx.Err(); err != nil {
		return ackedWrite{}, unavailable(op, err)
	}
	var out ackedWrite
	start := time.Now()
	pair := func(c multiClient) {
		send := func(first valkey.Completed) []valkey.ValkeyResult {
			if fence {
				return c.DoMulti(ctx, first, s.fenceCmd(c, key), s.ackCmd(c))
			}
			return c.DoMulti(ctx, first, s.ackCmd(c))
		}
		resps := send(c.B().Evalsha().Sha1(sc.sha).Numkeys(1).Key(key).Arg(args...).Build())
		if verr, ok := valkey.IsValkeyErr(resps[0].Error()); ok && verr.IsNoScript() {
			resps = send(c.B().Eval().Script(sc.src).Numkeys(1).Key(key).Arg(args...).Build())
		}
		out.res, out.ack = resps[0], resps[len(resps)-1]
		if fence {
			out.fence = resps[1]
		}
	}
	res := await(ctx, func() valkey.ValkeyResult {
		if s.client.Mode() != valkey.ClientModeCluster {
			// Standalone and Sentinel: a DoMulti holding a blocking
			// command (WAIT is one) runs whole on one dedicated
			// connection of the blocking pool (valkey-go mux.DoMulti,
			// blockingMulti), without the clean-up round trip that
			// returning a Dedicated client costs.
			pair(s.client)
			return out.res
		}
		err := s.client.Dedicated(func(c valkey.DedicatedClient) error {
			pair(c)
			return nil
		})
		if err != nil {
			return valkey.NewErrorResult(err)
		}
		return out.res
	})
	out.took = time.Since(start)
	if err := res.Error(); err != nil && !valkey.IsValkeyNil(err) {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		return out, unavailable(op, err)
	}
	if fence {
		if err := out.fence.Error(); err != nil {
			return out, unavailable(op, fmt.Errorf("acknowledgement fence: %w", err))
		}
	}
	return out, nil
}

// ackFenceSuffix names the key of fenceCmd in Cluster mode: the record key
// with it keeps the record's hash tag, so it lives on the record's slot.
const ackFenceSuffix = ":ack"

// fenceCmd builds the write that lets WAIT vouch for a record the script
// before it only read. WAIT counts the replication offset of its
// connection's last propagated write, and a script that only read (a
// claim answering Completed, get.lua) propagates nothing; the replication
// stream is one ordered stream per primary, and a write is appended to it
// before the next command runs, so a write made after the read has an
// offset past the completion the read saw, and its acknowledgement
// implies the completion's. Outside Cluster mode it is PUBLISH on
// ackChannel, which Valkey replicates (and no subscriber of the events
// channel hears); in Cluster mode PUBLISH and SPUBLISH travel over the
// cluster bus, not the replication stream, so it is a SET of a key in the
// record's slot (key + ackFenceSuffix) that expires after 1 ms. That SET
// may write, so a full Cluster under noeviction refuses it, and with acks
// on a full Cluster refuses replays too.
func (s *Store) fenceCmd(c multiClient, key string) valkey.Completed {
	if s.client.Mode() == valkey.ClientModeCluster {
		return c.B().Set().Key(key + ackFenceSuffix).Value("").PxMilliseconds(1).Build()
	}
	return c.B().Publish().Channel(s.prefix + ackChannel).Message("").Build()
}

// ackChannel, after the key prefix, is the channel fenceCmd publishes on.
const ackChannel = "acks"

// acked checks the acknowledgement of a write that changed the record,
// reports it to OnAck and returns an error wrapping
// store.ErrNotAcknowledged when it did not come in time, or
// store.ErrUnavailable when the acknowledgement command failed (WAITAOF on
// a primary without appendonly, WAIT on a replica).
func (s *Store) acked(op string, w ackedWrite) error {
	return s.ackedReport(op, w, s.onAck)
}

// ackedReport is acked reporting to report, when not nil. Get passes nil:
// OnAck's operations are a closed set of writes (the metrics' labels).
func (s *Store) ackedReport(op string, w ackedWrite, report func(string, time.Duration, bool)) error {
	ok, detail, err := s.ackOK(w.ack)
	if err != nil {
		if report != nil {
			report(op, w.took, false)
		}
		return unavailable(op, fmt.Errorf("acknowledgement: %w", err))
	}
	if report != nil {
		report(op, w.took, ok)
	}
	if !ok {
		return fmt.Errorf("valkey store: %s: %w: %s within %v", op, store.ErrNotAcknowledged, detail, s.acks.Timeout)
	}
	return nil
}

// ackOK interprets a WAIT or WAITAOF reply against s.acks; detail says what
// came, for the error.
func (s *Store) ackOK(ack valkey.ValkeyResult) (bool, string, error) {
	if s.acks.AOFLocal {
		v, err := ack.AsIntSlice()
		if err != nil {
			return false, "", err
		}
		if len(v) != 2 {
			return false, "", fmt.Errorf("WAITAOF reply %v", v)
		}
		detail := fmt.Sprintf("fsynced locally %d of 1, by %d of %d replicas", v[0], v[1], s.acks.Replicas)
		return v[0] >= 1 && v[1] >= int64(s.acks.Replicas), detail, nil
	}
	n, err := ack.AsInt64()
	if err != nil {
		return false, "", err
	}
	return n >= int64(s.acks.Replicas), fmt.Sprintf("%d of %d replicas acknowledged", n, s.acks.Replicas), nil
}

// notHeldAcked checks a script's "not held" answer (0: the record does not
// hold the token) against the acknowledgement sent after it, as acked
// checks a write. The script wrote nothing, so WAIT counts the replicas
// in sync with this connection's earlier writes: a primary with fewer
// replicas than Acks.Replicas cannot vouch for what it lacks. That is the
// old primary back empty (no persistence) while the clients still follow
// it, since they switch on Sentinel's +switch-master, which comes only
// once the other replicas are reconfigured: it answers "no record" for
// every claim the promoted replica holds, and a completion taken for lost
// there is dropped, its claim later taken over, and the operation run
// again. Such an answer is an error wrapping store.ErrNotAcknowledged, and
// the caller retries as after any refused write.
func (s *Store) notHeldAcked(op string, w ackedWrite) error {
	ok, detail, err := s.ackOK(w.ack)
	if err != nil {
		return unavailable(op, fmt.Errorf("acknowledgement of a not-held answer: %w", err))
	}
	if !ok {
		return fmt.Errorf("valkey store: %s: %w: the record does not hold the token, but %s within %v, so the primary may have lost it",
			op, store.ErrNotAcknowledged, detail, s.acks.Timeout)
	}
	return nil
}

// boolOpAcked is boolOp for the scripts that need an acknowledgement: a
// script that answered 1 wrote, and counts only once acknowledged; one
// that answered 0 counts only from a primary that could acknowledge
// (notHeldAcked).
func (s *Store) boolOpAcked(ctx context.Context, op string, sc script, key string, wake bool, args []string) (bool, error) {
	w, err := s.writeAcked(ctx, op, sc, key, args, false)
	if err != nil {
		return false, err
	}
	n, err := w.res.AsInt64()
	if err != nil {
		return false, unavailable(op, fmt.Errorf("reply: %w", err))
	}
	if n == 0 {
		return false, s.notHeldAcked(op, w)
	}
	if n != 1 {
		return false, nil
	}
	if wake {
		// The record changed on the primary whether or not it was
		// acknowledged: waiters re-read it.
		s.wake(key)
	}
	if err := s.acked(op, w); err != nil {
		return false, err
	}
	return true, nil
}

// checkReplicas is the acknowledgement part of Ping: every primary the
// client knows (the standalone or Sentinel primary, every Cluster master)
// must have at least Acks.Replicas replicas online whose last
// acknowledgement is at most maxReplicaLag seconds old, else no write it
// takes can be acknowledged and every keyed request fails closed. The error
// wraps store.ErrNotAcknowledged and names the primary.
func (s *Store) checkReplicas(ctx context.Context) error {
	if s.acks.Replicas == 0 {
		return nil
	}
	for addr, c := range s.client.Nodes() {
		info, err := c.Do(ctx, c.B().Info().Section("replication").Build()).ToString()
		if err != nil {
			return unavailable("ping", fmt.Errorf("INFO replication on %s: %w", addr, err))
		}
		role, online, connected := parseReplication(info)
		if role != "master" {
			continue
		}
		if online < s.acks.Replicas {
			return fmt.Errorf("valkey store: ping: %w: primary %s has %d replicas able to acknowledge (connected %d, lag <= %ds), acks.replicas is %d: keyed requests fail closed until enough replicas are back",
				store.ErrNotAcknowledged, addr, online, connected, maxReplicaLag, s.acks.Replicas)
		}
	}
	return nil
}

// parseReplication reads INFO replication: the role, the replicas in state
// online with lag <= maxReplicaLag, and connected_slaves.
func parseReplication(info string) (role string, online, connected int) {
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case name == "role":
			role = value
		case name == "connected_slaves":
			connected, _ = strconv.Atoi(value)
		case strings.HasPrefix(name, "slave") && strings.Contains(value, "state=online"):
			for _, kv := range strings.Split(value, ",") {
				if lag, ok := strings.CutPrefix(kv, "lag="); ok {
					if n, err := strconv.Atoi(lag); err == nil && n <= maxReplicaLag {
						online++
					}
				}
			}
		}
	}
	return role, online, connected
}
