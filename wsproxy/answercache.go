package wsproxy

import (
	"sync"
	"time"
)

// answerCache keeps the primary's yes-answers (may this token open this
// connection, this app) for as long as the primary said they are valid, so
// that a burst of requests costs one round trip to the primary. A no is
// never cached. Its zero value is ready; it is safe for concurrent use.
type answerCache[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]cachedAnswer[V]
}

type cachedAnswer[V any] struct {
	v       V
	expires time.Time
}

// get returns the answer for key if it has not expired at now.
func (c *answerCache[K, V]) get(key K, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

// put keeps v for key until now+ttl (nothing when ttl is not positive),
// dropping the answers that have expired by now.
func (c *answerCache[K, V]) put(key K, v V, now time.Time, ttl time.Duration) {
	if ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, old := range c.m {
		if !now.Before(old.expires) {
			delete(c.m, k)
		}
	}
	if c.m == nil {
		c.m = map[K]cachedAnswer[V]{}
	}
	c.m[key] = cachedAnswer[V]{v: v, expires: now.Add(ttl)}
}
