package valkey

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/valkey-io/valkey-go"
)

// maxResubscribeDelay caps the backoff between subscription attempts.
const maxResubscribeDelay = time.Second

// errNodeGone is a subscription's error while its node is out of the
// cluster's topology.
var errNodeGone = errors.New("node not in the cluster topology")

// topologyRefresh is how often, in Cluster mode, the store looks for
// primaries it does not subscribe to yet (a failover, a node added).
const topologyRefresh = time.Second

// Watch implements store.Store: the watcher is woken by the PUBLISH of
// Complete, Release, Delete and Tombstone from any process, and spuriously
// whenever a subscription is lost or (re-)established.
//
// A completion of layout 5 publishes only for a record a waiter marked, so
// Watch, once the watcher is registered, marks the record with mark.lua
// (whatever layout this store writes: a peer may write layout 5). When
// the record is not one whose completion will publish (absent, completed),
// or the mark fails, the watcher is woken at once and reads the record
// again: a wake-up is never lost, only early.
func (s *Store) Watch(id store.Identity) (<-chan struct{}, func()) {
	key := s.Key(id)
	ch, stop := s.watchers.Watch(key)
	go s.markWaited(key)
	return ch, stop
}

// markWaited runs mark.lua on key and wakes its watchers unless the
// record's completion will publish. No deadline of its own: valkey-go
// ends a call on a dead connection within ConnTimeout (and a dial within
// DialTimeout), and a context with a timer cost the waiting path four
// allocations more.
func (s *Store) markWaited(key string) {
	res, _, err := s.execKey(context.Background(), "mark", s.mark, key)
	if err == nil {
		if n, nerr := res.AsInt64(); nerr == nil && n != 0 {
			return
		}
	}
	s.wake(key)
}

func (s *Store) wake(key string) { s.watchers.Wake(key) }

func (s *Store) wakeAll() { s.watchers.WakeAll() }

// subscribe keeps the events subscription until ctx ends and closes ready
// once it is confirmed: on the server (standalone, or the primary Sentinel
// names, which valkey-go follows), or in Cluster mode on every primary.
func (s *Store) subscribe(ctx context.Context, ready chan struct{}) {
	defer close(s.subDone)
	if s.client.Mode() != valkey.ClientModeCluster {
		var once sync.Once
		node := func() valkey.Client { return s.client }
		s.subscribeOn(ctx, "", node, func() { once.Do(func() { close(ready) }) })
		return
	}
	s.subscribePrimaries(ctx, ready)
}

// subscribePrimaries subscribes to the events channel on every primary of
// the cluster, and on primaries that appear later, until ctx ends. ready
// closes once every primary known at the start confirmed its
// subscription.
//
// A script PUBLISHes on the primary that runs it, which hands the message
// to that node's subscribers and forwards it over the cluster bus to the
// other nodes. The bus drops it without a trace when the link between the
// two nodes is down at that moment: links of a fresh cluster still being
// set up, a link reset after a slow answer (node timeout / 2), a node
// restart; Valkey 8.0 even closes a fresh link, message lost, when the
// first message on it is a lightweight PUBLISH. A single subscription on
// one node (valkey-go's cluster Receive picks one) then misses the
// wake-up for good (TestWatchClusterBusLoss). With a subscription on
// every primary each message comes straight from the node that ran the
// script, over a connection whose loss this store sees (and answers with
// a wake-up of every watcher); the copies the bus brings from the other
// nodes wake nobody twice (Wake forgets its waiters).
func (s *Store) subscribePrimaries(ctx context.Context, ready chan struct{}) {
	var wg sync.WaitGroup
	defer wg.Wait()
	type sub struct {
		stop      context.CancelFunc
		confirmed atomic.Bool
	}
	subs := map[string]*sub{}
	confirmed := make(chan struct{}, 1)
	tick := time.NewTicker(topologyRefresh)
	defer tick.Stop()
	isReady, refresh := false, true
	for {
		if refresh {
			nodes := s.client.Nodes()
			for addr, sb := range subs {
				if nodes[addr] == nil {
					sb.stop()
					delete(subs, addr)
				}
			}
			for addr, c := range nodes {
				primary, known := isPrimary(ctx, c)
				sb := subs[addr]
				switch {
				case !known:
					// A slow node is not a demoted one: its subscription,
					// if any, stays, and none starts before it answers.
				case sb != nil && !primary:
					// A replica now: the new primary's subscription wakes
					// every watcher when it is confirmed.
					sb.stop()
					delete(subs, addr)
				case sb == nil && primary:
					nctx, stop := context.WithCancel(ctx)
					sb = &sub{stop: stop}
					subs[addr] = sb
					wg.Add(1)
					go func() {
						defer wg.Done()
						// Asked on every attempt: valkey-go replaces the
						// connection of a node it dropped and found again.
						node := func() valkey.Client { return s.client.Nodes()[addr] }
						s.subscribeOn(nctx, addr, node, func() {
							sb.confirmed.Store(true)
							select {
							case confirmed <- struct{}{}:
							default:
							}
						})
					}()
				}
			}
		}
		if !isReady && len(subs) > 0 {
			isReady = true
			for _, sb := range subs {
				isReady = isReady && sb.confirmed.Load()
			}
			if isReady {
				close(ready)
			}
		}
		select {
		case <-ctx.Done():
			for _, sb := range subs {
				sb.stop()
			}
			return
		case <-tick.C:
			refresh = true
		case <-confirmed:
			refresh = false
		}
	}
}

// isPrimary asks node c its ROLE: known is false when it did not answer
// within topologyRefresh.
func isPrimary(ctx context.Context, c valkey.Client) (primary, known bool) {
	ctx, cancel := context.WithTimeout(ctx, topologyRefresh)
	defer cancel()
	role, err := c.Do(ctx, c.B().Role().Build()).ToArray()
	if err != nil || len(role) == 0 {
		return false, false
	}
	name, err := role[0].ToString()
	if err != nil {
		return false, false
	}
	return name == "master", true
}

// subscribeOn keeps one SUBSCRIBE to the events channel through the
// client node returns (addr names its node in logs, empty for the only
// one; nil when valkey-go no longer knows the node) until ctx ends,
// re-subscribing with backoff after errors, and calls confirmed each time
// the server confirms it. Every confirmation wakes all watchers, since
// notifications may have been missed before it.
func (s *Store) subscribeOn(ctx context.Context, addr string, node func() valkey.Client, confirmed func()) {
	delay := 50 * time.Millisecond
	for {
		var subscribed atomic.Bool
		hctx := valkey.WithOnSubscriptionHook(ctx, func(sub valkey.PubSubSubscription) {
			if sub.Kind != "subscribe" || sub.Channel != s.channel {
				return
			}
			// valkey-go re-subscribes by itself after a reconnection, so a
			// second confirmation in one Receive is the other sign of an
			// outage.
			if subscribed.Swap(true) && s.onDisruption != nil {
				s.onDisruption()
			}
			s.wakeAll()
			confirmed()
		})
		err := errNodeGone
		if c := node(); c != nil {
			err = c.Receive(hctx, c.B().Subscribe().Channel(s.channel).Build(), func(m valkey.PubSubMessage) {
				s.wake(m.Message)
			})
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("valkey store: events subscription lost; re-subscribing", "channel", s.channel, "node", addr, "err", err)
		if s.onDisruption != nil {
			s.onDisruption()
		}
		s.wakeAll()
		if subscribed.Load() {
			delay = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxResubscribeDelay)
	}
}
