// Package bodydeadline bounds the time a request has to send its body. It
// owns only that deadline: it must not read, limit or answer requests.
//
// http.Server's ReadHeaderTimeout bounds a request's headers, not its body:
// a client that sends Content-Length: 100 and then a byte a second holds
// its connection, and the handler reading the body (or the server
// discarding it after an early answer), for as long as it likes. Every
// request that has a body must therefore send all of it within
// Default (or the server's own setting) of its start; after that
// a read of the body fails and the server closes the connection once it has
// answered. Every JSON body is capped at 1 MiB, so the deadline asks for at
// least ~17 KiB/s.
//
// Requests without a body (GETs, WebSocket upgrades, log follows,
// long-polls, every mirror download) get no deadline, so nothing ends a
// long answer. For a request with a body, net/http clears the deadline
// itself once the body has been read to its end (before it starts watching
// for the client going away) and when a handler hijacks the connection. A
// handler lifts it (Lift) for a body that may stream for long, once the
// request has been authenticated and authorized: coderd's template uploads
// (POST /api/v2/files) and dev URLs, whose bodies stream to a workspace's
// app. Unauthenticated requests to them have the deadline like any other.
//
// The deadline is wall-clock time (a network deadline), not the API's
// clock: a test clock cannot move a socket's deadline.
package bodydeadline

import (
	"context"
	"net/http"
	"time"
)

// Default is how long a request has to send its body (coderd's and the
// mirror's BodyReadTimeout option).
const Default = 60 * time.Second

// contextKey holds, in a request's context, the controller that set
// its body deadline (for Lift).
type contextKey struct{}

// Wrap wraps h so that the body of every request that has one
// must arrive within d of the request's start (see above); d <= 0 returns h
// as it is. The API wraps its own router with it; servers that serve other
// handlers beside the API wrap those too.
func Wrap(d time.Duration, h http.Handler) http.Handler {
	if d <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			// No connection to set it on (a ResponseRecorder).
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), contextKey{}, rc)))
	})
}

// Lift lets r's body take as long as it takes: for an
// authenticated upload or dev URL request.
func Lift(r *http.Request) {
	if rc, ok := r.Context().Value(contextKey{}).(*http.ResponseController); ok {
		_ = rc.SetReadDeadline(time.Time{})
	}
}
