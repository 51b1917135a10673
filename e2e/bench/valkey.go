package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// valkeyInstall is printed when valkey-server is missing.
const valkeyInstall = "valkey-server not found on PATH: install it (Debian 12: apt-get install -t bookworm-backports valkey-server, or scripts/install-valkey.sh)"

// startValkey starts a throwaway valkey-server (no persistence) named name
// on a free loopback port and waits until it answers PING; with primary
// set ("host:port") it is a replica of primary, and it waits until the
// replication link is up.
func startValkey(ctx context.Context, ps *procs, name, primary string) (*proc, error) {
	bin, err := exec.LookPath("valkey-server")
	if err != nil {
		return nil, fmt.Errorf("%s", valkeyInstall)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", ps.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
	}
	if primary != "" {
		host, pport, err := net.SplitHostPort(primary)
		if err != nil {
			return nil, err
		}
		args = append(args, "--replicaof", host, pport, "--dbfilename", name+".rdb")
	}
	p, err := ps.start(name, bin, args, false)
	if err != nil {
		return nil, err
	}
	p.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := valkeyCommand(p.addr, "PING"); err == nil && primary == "" {
			return p, nil
		} else if err == nil {
			info, ierr := valkeyCommand(p.addr, "INFO", "replication")
			if ierr == nil && strings.Contains(info, "master_link_status:up") {
				return p, nil
			}
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("valkey-server on %s did not answer PING: %w (log %s)", p.addr, err, p.log)
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("valkey-server exited at start (log %s)", p.log)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// valkeyCommand sends one command in RESP and returns a simple or bulk
// string reply, or an integer reply in decimal.
func valkeyCommand(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "+"), strings.HasPrefix(line, ":"):
		return line[1:], nil
	case strings.HasPrefix(line, "$"):
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("valkey replied %q", line)
}

// cmdStats is INFO commandstats: calls per command name (lowercase; a
// command run inside a Lua script counts too).
type cmdStats map[string]int64

func readCmdStats(addr string) (cmdStats, error) {
	info, err := valkeyCommand(addr, "INFO", "commandstats")
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	out := cmdStats{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out, nil
}

// clientCommands are the commands a client sends itself (round trips);
// every other command in commandstats ran inside a script. WAIT (acks on)
// is not among them: it travels in one pipeline with its script, so it
// adds a command and the replica's delay, not a round trip. A replay-cache
// miss is CLIENT CACHING YES, MULTI, PTTL, HGETALL, EXEC in one
// pipeline: its EXEC counts it once; a hit sends nothing. SET is counted
// apart (clientSets): a claim of layout 4 or 5 sends it alone (or
// pipelined with a PEXPIRETIME, which is therefore not counted), and
// complete4.lua and complete5.lua run one inside their script.
var clientCommands = map[string]bool{
	"evalsha": true, "evalsha_ro": true, "eval": true, "eval_ro": true, "script": true,
	"ping": true, "hello": true, "client": true, "subscribe": true, "exec": true,
}

// clientSets estimates the SETs a client sent itself from commandstats'
// counts: layout 4's and 5's claims and replay reads send SET, and their
// scripts (complete4.lua, complete5.lua, claim.lua on a record that is
// not fresh) run one SET inside each call, so every script call beyond
// those stands for one SET that was not a round trip. Layout 3 writes
// hashes and sends no SET, which this reads as 0. An estimate: a layout 4
// script that ends without its SET (a token that lost its key) makes it
// undercount by one, a complete5.lua that puts a record back (two SETs)
// overcount by one.
func clientSets(byName map[string]int64) int64 {
	n := byName["set"] - byName["evalsha"] - byName["eval"]
	if n < 0 {
		return 0
	}
	return n
}
