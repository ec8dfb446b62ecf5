package coderd

import (
	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
)

// Who may do what changes rarely (a user suspended, a role taken away, a
// token deleted), and every change is announced to every replica when it
// commits (database.ChannelAuthChanged, sent by a trigger). A replica
// counts the announcements; a token checked at count N still holds, with
// no query, while the count is N, the key has not expired and the
// replica's notifications were listening throughout (a reconnect counts as
// a change, since announcements may have been missed). Prepared relay
// connections use this to connect without a second database round trip
// (relayprepared.go); everything else checks the database on every
// request.

const ctxAuthEpoch = "coderd.authepoch"

// watchAuthChanges counts the announcements of changes; handlers that make
// such a change on this replica count it at once too (authChanged), so
// that their own next request never races the notification.
func (api *API) watchAuthChanges() {
	if api.ps == nil {
		return // nothing is trusted without a check (authStillHolds)
	}
	api.ps.Subscribe(database.ChannelAuthChanged, func(string) { api.authChanged() })
}

// authChanged counts a change of who may do what.
func (api *API) authChanged() { api.authEpoch.Add(1) }

// authEpochOf is the count when c's token was checked.
func authEpochOf(c *gin.Context) uint64 { return c.GetUint64(ctxAuthEpoch) }

// authStillHolds reports whether a token checked at epoch, for key, holds
// now without asking the database.
func (api *API) authStillHolds(epoch uint64, key database.APIKey) bool {
	return api.ps != nil && api.ps.Listening() && api.authEpoch.Load() == epoch && api.now().Before(key.ExpiresAt)
}
