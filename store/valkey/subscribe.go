package valkey

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/store"
	"github.com/valkey-io/valkey-go"
)

// maxResubscribeDelay caps the backoff between subscription attempts.
const maxResubscribeDelay = time.Second

// Watch implements store.Store: the watcher is woken by the PUBLISH of
// Complete, Release and Delete from any process, and spuriously whenever the
// subscription is lost or re-established.
func (s *Store) Watch(id store.Identity) (<-chan struct{}, func()) {
	return s.watchers.Watch(s.Key(id))
}

func (s *Store) wake(key string) { s.watchers.Wake(key) }

func (s *Store) wakeAll() { s.watchers.WakeAll() }

// subscribe keeps one SUBSCRIBE to the events channel until ctx ends,
// re-subscribing with backoff after errors. Every (re)subscription wakes all
// watchers, since notifications may have been missed meanwhile.
func (s *Store) subscribe(ctx context.Context, ready chan struct{}) {
	defer close(s.subDone)
	var readyOnce sync.Once
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
			readyOnce.Do(func() { close(ready) })
		})
		err := s.client.Receive(hctx, s.client.B().Subscribe().Channel(s.channel).Build(), func(m valkey.PubSubMessage) {
			s.wake(m.Message)
		})
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("valkey store: events subscription lost; re-subscribing", "channel", s.channel, "err", err)
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
